// Command typecheck answers "would this module graph compile?" in a fraction
// of a cold build's time: it type-checks from source, in dependency order,
// every package `go list -deps PATTERN...` names in the module in DIR, and
// prints each package with type errors (the standard library's function
// bodies are skipped). docs/development.md uses it to check aligning the
// plugin's pulumi and k8s.io versions with the other tools'.
//
//	go build -C tools/typecheck -o /tmp/typecheck .
//	/tmp/typecheck DIR PATTERN...
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
)

type listed struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	ImportMap  map[string]string
	Module     *struct{ Path, Version string }
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func main() {
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,ImportMap,Module"}, os.Args[2:]...)...)
	cmd.Dir = os.Args[1]
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go list:", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	pkgs := map[string]*types.Package{"unsafe": types.Unsafe}
	fset := token.NewFileSet()
	failed, checked := 0, 0
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			panic(err)
		}
		if p.ImportPath == "unsafe" {
			continue
		}
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				fmt.Println("PARSE", p.ImportPath, err)
				continue
			}
			files = append(files, af)
		}
		var errs []error
		conf := types.Config{
			IgnoreFuncBodies: p.Standard,
			FakeImportC:      true,
			Sizes:            types.SizesFor("gc", "amd64"),
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if m, ok := p.ImportMap[path]; ok {
					path = m
				}
				if pk, ok := pkgs[path]; ok {
					return pk, nil
				}
				return nil, fmt.Errorf("package %s not available", path)
			}),
			Error: func(err error) { errs = append(errs, err) },
		}
		pkg, _ := conf.Check(p.ImportPath, fset, files, nil)
		pkgs[p.ImportPath] = pkg
		checked++
		if len(errs) > 0 {
			failed++
			mod := "std"
			if p.Module != nil {
				mod = p.Module.Path + "@" + p.Module.Version
			}
			fmt.Printf("FAIL %s (%s): %d errors\n", p.ImportPath, mod, len(errs))
			for i, e := range errs {
				if i == 5 {
					break
				}
				fmt.Println("   ", e)
			}
		}
	}
	fmt.Printf("checked %d packages, %d with type errors\n", checked, failed)
}
