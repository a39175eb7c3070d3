package main

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The same vectors are checked by tests/unit/test_podresources.py against the
// Python fake_gpu_uuid; they were computed with sha1sum.
func TestFakeGPUUUID(t *testing.T) {
	for _, tc := range []struct {
		node  string
		index int
		want  string
	}{
		{"a100-000", 0, "GPU-67567bec-be9f-6d30-e8e7-99ef9cfc9f36"},
		{"a100-000", 1, "GPU-6a2442b4-d6e1-4d15-dfe2-2f5832b7b458"},
		{"h100-003", 7, "GPU-20845cf0-5c48-e48f-959e-11875752351b"},
	} {
		if got := fakeGPUUUID(tc.node, tc.index); got != tc.want {
			t.Errorf("fakeGPUUUID(%q, %d) = %s, want %s", tc.node, tc.index, got, tc.want)
		}
	}
}

func gpuNode(name string, gpus int64) *node {
	return &node{manifest: corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI),
		}},
	}}
}

func container(name string, gpus int64) corev1.Container {
	c := corev1.Container{Name: name}
	if gpus > 0 {
		c.Resources.Requests = corev1.ResourceList{gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return c
}

func gpuPod(name, nodeName string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: containers},
	}
}

// admitGPUs does what admit does to the runner's state, without the API.
func admitGPUs(t *testing.T, r *podRunner, pod *corev1.Pod, prefer []int) (*podRecord, bool) {
	t.Helper()
	key := pod.Namespace + "/" + pod.Name
	rec := &podRecord{key: key, node: pod.Spec.NodeName, requests: podRequests(pod)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, _, ok := r.assignGPUs(key, rec, pod, prefer); !ok {
		return nil, false
	}
	r.reserve(key, rec)
	return rec, true
}

func indices(rec *podRecord) map[string][]int {
	out := map[string][]int{}
	for _, c := range rec.containers {
		out[c.name] = c.indices
	}
	return out
}

func TestAssignGPUsLowestFreeFirstAndFreedOnRelease(t *testing.T) {
	r := newPodRunner(nil, map[string]*node{"n": gpuNode("n", 4)})

	a, ok := admitGPUs(t, r, gpuPod("a", "n", container("main", 2)), nil)
	if !ok || !slices.Equal(indices(a)["main"], []int{0, 1}) {
		t.Fatalf("pod a: got %v, want main: [0 1]", indices(a))
	}

	// A sidecar is listed (and served) before the app containers.
	b := gpuPod("b", "n", container("trainer", 1), container("logger", 0))
	sidecar := container("proxy", 1)
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	b.Spec.InitContainers = []corev1.Container{container("setup", 1), sidecar}
	recB, ok := admitGPUs(t, r, b, nil)
	if !ok {
		t.Fatal("pod b was not given its GPUs")
	}
	var names []string
	for _, c := range recB.containers {
		names = append(names, c.name)
	}
	if !slices.Equal(names, []string{"proxy", "trainer", "logger"}) {
		t.Errorf("listed containers = %v, want [proxy trainer logger]", names)
	}
	if got := gpuIndices(recB); got != "2,3" {
		t.Errorf("pod b GPU indices = %q, want \"2,3\"", got)
	}

	if _, ok := admitGPUs(t, r, gpuPod("c", "n", container("main", 1)), nil); ok {
		t.Fatal("pod c was given a GPU on a full node")
	}
	r.mu.Lock()
	r.release(a)
	r.mu.Unlock()
	if len(r.active["n"]) != 1 {
		t.Errorf("active pods after release = %d, want 1", len(r.active["n"]))
	}
	c, ok := admitGPUs(t, r, gpuPod("c", "n", container("main", 1)), nil)
	if !ok || gpuIndices(c) != "0" {
		t.Fatalf("pod c after a was released: %v, want main: [0]", indices(c))
	}
	// An adopted pod keeps the GPUs its annotation names while they are free ...
	d, ok := admitGPUs(t, r, gpuPod("d", "n", container("main", 1)), parseGPUIndices("1"))
	if !ok || gpuIndices(d) != "1" {
		t.Fatalf("pod d adopted with annotation \"1\": %v, want main: [1]", indices(d))
	}
	// ... and gets the lowest free ones otherwise.
	r.mu.Lock()
	r.release(c)
	r.mu.Unlock()
	e, ok := admitGPUs(t, r, gpuPod("e", "n", container("main", 1)), parseGPUIndices("3"))
	if !ok || gpuIndices(e) != "0" {
		t.Fatalf("pod e adopted with a held index: %v, want main: [0]", indices(e))
	}
}

func TestParseGPUIndices(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0,1": {0, 1}, "3": {3}, "0,x": nil} {
		if got := parseGPUIndices(in); !slices.Equal(got, want) {
			t.Errorf("parseGPUIndices(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestUnhealthyGPUsAreNeverGivenOut(t *testing.T) {
	r := newPodRunner(nil, map[string]*node{"n": gpuNode("n", 4)})
	r.setUnhealthy("n", parseGPUIndices("0,2"))

	a, ok := admitGPUs(t, r, gpuPod("a", "n", container("main", 2)), nil)
	if !ok || gpuIndices(a) != "1,3" {
		t.Fatalf("pod a on a node with GPUs 0 and 2 out of service: %v, want [1 3]", indices(a))
	}
	if _, ok := admitGPUs(t, r, gpuPod("b", "n", container("main", 1)), nil); ok {
		t.Fatal("pod b was given an unhealthy GPU")
	}
	// back in service: given out again
	r.setUnhealthy("n", nil)
	b, ok := admitGPUs(t, r, gpuPod("b", "n", container("main", 1)), nil)
	if !ok || gpuIndices(b) != "0" {
		t.Fatalf("pod b after GPU 0 came back: %v, want [0]", indices(b))
	}
}
