// Command fake-kubelet registers the fake GPU nodes of gangops' local control
// plane and acts as their kubelet, so the scheduler and the tests see nodes
// that behave like real ones without containers, a container runtime or GPUs.
//
// One process serves every node of the cluster description (1,000 and more):
//
//   - it creates each Node (with its status: capacity, allocatable, Ready) and
//     its Lease in kube-node-lease, renews the Leases like a kubelet does, and
//     puts the Ready condition back when the node lifecycle controller marks a
//     node Unknown (for instance after the machine was suspended);
//   - it admits pods bound to its nodes against the node's allocatable, as the
//     kubelet does (a pod that does not fit fails with reason OutOf<resource>),
//     moves admitted pods to Running, and finishes them when told to by an
//     annotation or after a duration given on the pod (see annotations below);
//   - it confirms graceful deletions (deletes with grace period 0), so
//     namespaces and pods are removed as on a real cluster;
//   - with --pod-resources-dir DIR, it plays the GPU device plugin and serves
//     the kubelet's pod-resources gRPC API (v1: List, Get,
//     GetAllocatableResources) for each node on the unix socket DIR/<node>.sock
//     (at most 107 bytes: a longer path is an error at start). A node has
//     as many GPUs as its allocatable nvidia.com/gpu; an admitted pod's
//     containers that request nvidia.com/gpu get that many, lowest free index
//     first, freed when the pod finishes or is deleted. The API reports a GPU
//     by its UUID, "GPU-" and the first 16 bytes of
//     sha1("gangops-fake-gpu/<node>/<index>") as 8-4-4-4-12 lowercase hex
//     (controller/agent/podresources.py's fake_gpu_uuid), one ContainerDevices
//     entry per GPU as the kubelet's device manager reports them.
//
// Pod annotations (documented for users in clusters/local/README.md):
//
//	gangops.ai/fake-exit: Succeeded|Failed    finish the pod now with that phase
//	gangops.ai/fake-duration-seconds: "N"     finish the pod N seconds after it started
//	gangops.ai/fake-exit-code: "N"            exit code used by fake-duration-seconds
//	                                          (default 0: Succeeded; otherwise Failed)
//
// and the one it writes with the Running status of a pod given GPUs:
//
//	gangops.ai/fake-gpu-indices: "0,1"        the GPU indices of its containers, in the
//	                                          order the pod-resources API lists them
//
// The node manifests come from the launcher (controller/devcluster), which
// builds them from clusters/local/cluster.yaml, so the topology labels are
// defined in one place.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user allowed to write nodes, leases and pods")
	nodesFile := flag.String("nodes", "", "JSON file holding a list of v1.Node manifests to register")
	readyFile := flag.String("ready-file", "", "file written once every node is registered and the pod watch is synced")
	leaseDuration := flag.Int("lease-duration-seconds", 40, "Lease.spec.leaseDurationSeconds of each node (the kubelet's default)")
	renewInterval := flag.Duration("renew-interval", 10*time.Second, "how often each node's Lease is renewed (the kubelet's default)")
	qps := flag.Float64("qps", 500, "client-side request rate limit")
	burst := flag.Int("burst", 1000, "client-side request burst")
	workers := flag.Int("workers", 16, "parallel registrations and pod workers")
	podResourcesDir := flag.String("pod-resources-dir", "", "serve each node's kubelet pod-resources API on the unix socket `DIR`/<node>.sock (none when empty)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	klog.SetSlogLogger(logger)

	if err := run(*kubeconfig, *nodesFile, *readyFile, options{
		leaseDurationSeconds: int32(*leaseDuration),
		renewInterval:        *renewInterval,
		workers:              *workers,
		podResourcesDir:      *podResourcesDir,
	}, float32(*qps), *burst); err != nil {
		slog.Error("fake-kubelet failed", "err", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodesFile, readyFile string, opts options, qps float32, burst int) error {
	if kubeconfig == "" || nodesFile == "" {
		return fmt.Errorf("--kubeconfig and --nodes are required")
	}
	data, err := os.ReadFile(nodesFile)
	if err != nil {
		return err
	}
	var nodes []corev1.Node
	if err := json.Unmarshal(data, &nodes); err != nil {
		return fmt.Errorf("%s: %w", nodesFile, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "gangops-fake-kubelet"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	k := newKubelet(cs, nodes, opts)
	var podResources *podResourcesServer
	if opts.podResourcesDir != "" {
		names := make([]string, len(nodes))
		for i := range nodes {
			names[i] = nodes[i].Name
		}
		// Bound before registering, so a bad directory fails at once.
		if podResources, err = listenPodResources(opts.podResourcesDir, names, k.pods); err != nil {
			return err
		}
		defer podResources.stop()
	}
	if err := k.waitForAPI(ctx); err != nil {
		return fmt.Errorf("waiting for the API server: %w", err)
	}
	start := time.Now()
	if err := k.registerAll(ctx); err != nil {
		return err
	}
	slog.Info("nodes registered", "count", len(nodes), "elapsed", time.Since(start).Round(time.Millisecond))
	if err := k.start(ctx); err != nil {
		return err
	}
	if podResources != nil {
		podResources.serve()
		slog.Info("serving the pod-resources API", "dir", opts.podResourcesDir, "sockets", len(nodes))
	}
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte(fmt.Sprintf("%d\n", len(nodes))), 0o644); err != nil {
			return err
		}
	}
	slog.Info("fake-kubelet ready", "nodes", len(nodes), "elapsed", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	k.shutdown()
	slog.Info("fake-kubelet stopped")
	return nil
}
