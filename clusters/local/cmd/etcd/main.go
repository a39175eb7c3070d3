// Command etcd is the upstream etcd server (the same version Kubernetes pins),
// built from go.etcd.io/etcd/server/v3 for gangops' local control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
