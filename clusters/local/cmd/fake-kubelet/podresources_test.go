package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func dial(t *testing.T, socket string) podresourcesv1.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return podresourcesv1.NewPodResourcesListerClient(conn)
}

// deviceIDs flattens a container's devices of resource nvidia.com/gpu.
func deviceIDs(devs []*podresourcesv1.ContainerDevices) []string {
	var out []string
	for _, d := range devs {
		if d.ResourceName == string(gpuResource) {
			out = append(out, d.DeviceIds...)
		}
	}
	return out
}

// Each node's socket answers for that node only: its pods, its GPUs.
func TestPodResourcesServedPerNodeSocket(t *testing.T) {
	r := newPodRunner(nil, map[string]*node{"n1": gpuNode("n1", 2), "n2": gpuNode("n2", 1)})
	admitGPUs(t, r, gpuPod("train", "n1", container("main", 2)), nil)
	admitGPUs(t, r, gpuPod("cpu-only", "n1", container("main", 0)), nil)
	admitGPUs(t, r, gpuPod("infer", "n2", container("server", 1)), nil)

	dir := t.TempDir()
	s, err := listenPodResources(dir, []string{"n1", "n2"}, r)
	if err != nil {
		t.Fatal(err)
	}
	s.serve()
	t.Cleanup(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	n1 := dial(t, filepath.Join(dir, "n1.sock"))
	list, err := n1.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range list.PodResources {
		for _, c := range p.Containers {
			got[p.Namespace+"/"+p.Name+"/"+c.Name] = deviceIDs(c.Devices)
		}
	}
	want := map[string][]string{
		"ns/cpu-only/main": nil,
		"ns/train/main":    {fakeGPUUUID("n1", 0), fakeGPUUUID("n1", 1)},
	}
	if len(got) != len(want) || !slices.Equal(got["ns/train/main"], want["ns/train/main"]) || got["ns/cpu-only/main"] != nil {
		t.Errorf("List on n1 = %v, want %v", got, want)
	}

	alloc, err := dial(t, filepath.Join(dir, "n2.sock")).GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ids := deviceIDs(alloc.Devices); !slices.Equal(ids, []string{fakeGPUUUID("n2", 0)}) {
		t.Errorf("GetAllocatableResources on n2 = %v, want [%s]", ids, fakeGPUUUID("n2", 0))
	}

	one, err := n1.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "train", PodNamespace: "ns"})
	if err != nil || one.PodResources.Name != "train" {
		t.Errorf("Get train on n1 = %v, %v", one, err)
	}
	_, err = n1.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "infer", PodNamespace: "ns"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Get of n2's pod on n1: err %v, want NotFound", err)
	}
}

func TestPodResourcesSocketPathTooLong(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	_, err := listenPodResources(dir, []string{"a100-000"}, newPodRunner(nil, nil))
	if err == nil || !strings.Contains(err.Error(), "longer than the 107") || !strings.Contains(err.Error(), "a100-000.sock") {
		t.Fatalf("err = %v, want the socket path and the 107-byte limit", err)
	}
}
