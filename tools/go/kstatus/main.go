// Command kstatus prints the kstatus of one Kubernetes object: the status
// Argo CD, Flux and `kpt live status` compute for any resource, from
// sigs.k8s.io/cli-utils/pkg/kstatus/status.
//
//	kstatus < object.json                             the object's JSON (or YAML) on stdin
//	kstatus --kubeconfig K -n NS RESOURCE.VERSION.GROUP/NAME   fetch it first
//	kstatus -version                                  the cli-utils module it was built from
//
// It prints `STATUS: message` (or, with -o json, {"status", "message"}) and
// exits 0 whatever the status; 2 for bad usage, 1 when the object cannot be
// read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type usageError struct{ error }

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	flags := flag.NewFlagSet("kstatus", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig to fetch the object with (default: read it on stdin)")
	namespace := flags.String("n", "", "namespace of the object to fetch")
	output := flags.String("o", "text", "output: text or json")
	version := flags.Bool("version", false, "print the sigs.k8s.io/cli-utils version and exit")
	if err := flags.Parse(args); err != nil {
		return usageError{err}
	}
	if *version {
		_, err := fmt.Fprintf(stdout, "kstatus (%s)\n", cliUtilsVersion())
		return err
	}
	if *output != "text" && *output != "json" {
		return usageError{fmt.Errorf("-o must be text or json, not %q", *output)}
	}
	var object *unstructured.Unstructured
	var err error
	switch {
	case flags.NArg() == 0 && *kubeconfig == "":
		object, err = decode(stdin)
	case flags.NArg() == 1 && *kubeconfig != "":
		object, err = fetch(*kubeconfig, *namespace, flags.Arg(0))
	default:
		return usageError{errors.New("give either an object on stdin, or --kubeconfig and one RESOURCE.VERSION.GROUP/NAME")}
	}
	if err != nil {
		return err
	}
	result, err := status.Compute(object)
	if err != nil {
		return fmt.Errorf("computing the status: %w", err)
	}
	if *output == "json" {
		return json.NewEncoder(stdout).Encode(map[string]string{
			"status":  result.Status.String(),
			"message": result.Message,
		})
	}
	_, err = fmt.Fprintf(stdout, "%s: %s\n", result.Status, result.Message)
	return err
}

// cliUtilsVersion names the kstatus library this binary was built from.
func cliUtilsVersion() string {
	const module = "sigs.k8s.io/cli-utils"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return module + " " + dep.Version
			}
		}
	}
	return module + " (version unknown)"
}

// decode reads one object, JSON or YAML (numbers as int64, as from the API server).
func decode(in io.Reader) (*unstructured.Unstructured, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, fmt.Errorf("reading the object on stdin: %w", err)
	}
	document, err := yaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("reading the object on stdin: %w", err)
	}
	object := &unstructured.Unstructured{}
	if err := object.UnmarshalJSON(document); err != nil {
		return nil, fmt.Errorf("reading the object on stdin: %w", err)
	}
	return object, nil
}

// fetch GETs RESOURCE.VERSION.GROUP/NAME (RESOURCE.VERSION/NAME for the core group).
func fetch(kubeconfig, namespace, target string) (*unstructured.Unstructured, error) {
	resource, name, found := strings.Cut(target, "/")
	parts := strings.SplitN(resource, ".", 3)
	if !found || name == "" || len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return nil, usageError{fmt.Errorf("%q is not RESOURCE.VERSION.GROUP/NAME (e.g. proxies.v1alpha1.crawl.example.com/web-1)", target)}
	}
	gvr := schema.GroupVersionResource{Resource: parts[0], Version: parts[1]}
	if len(parts) == 3 {
		gvr.Group = parts[2]
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	resources := client.Resource(gvr)
	if namespace != "" {
		return resources.Namespace(namespace).Get(context.Background(), name, metav1.GetOptions{})
	}
	return resources.Get(context.Background(), name, metav1.GetOptions{})
}
