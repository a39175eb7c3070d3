// Command kubectl is the Kubernetes command-line client, built from the same
// Kubernetes release as the local control plane (so client and server agree),
// for the demo and the docs: `kubectl get tj`, `kubectl describe`.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
