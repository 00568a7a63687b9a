// Command coredns is CoreDNS with only the plugins the dev cluster's Corefile
// uses (see egress_proxies/devcluster/clusterdns.py): upstream's main
// (github.com/coredns/coredns/coredns.go) imports every plugin through
// core/plugin, this one imports these few, which keeps the build small.
// The order plugins run in stays upstream's (dnsserver.Directives).
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() {
	coremain.Run()
}
