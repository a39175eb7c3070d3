package main

// GPUs: the device plugin's part. When a pod is admitted, each container that
// requests nvidia.com/gpu is given that many of its node's GPUs, lowest free
// index first; they are freed when the pod finishes or is deleted. The
// pod-resources API (podresources.go) reports them by UUID.

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	gpuResource corev1.ResourceName = "nvidia.com/gpu"

	// annotationGPUIndices lists the GPU indices given to a pod's containers, in
	// the order the pod-resources API lists the containers ("0,1"). It is written
	// with the Running status; a restarted fake-kubelet adopts the same GPUs.
	annotationGPUIndices = "gangops.ai/fake-gpu-indices"

	// annotationUnhealthyGPUs is where the node agent lists the node's GPUs out of
	// service ("1,3"; controller/nodehealth.py). Like the NVIDIA device plugin with a
	// device marked Unhealthy, the fake kubelet never gives them to a pod.
	annotationUnhealthyGPUs = "gangops.ai/unhealthy-gpus"
)

// fakeGPUUUID is the UUID of GPU index on node: "GPU-", then the first 16 bytes
// of sha1("gangops-fake-gpu/<node>/<index>") as lowercase hex in 8-4-4-4-12
// groups. controller/agent/podresources.py's fake_gpu_uuid is the same function
// (both tests check the same vector).
func fakeGPUUUID(node string, index int) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("gangops-fake-gpu/%s/%d", node, index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// containerGPUs is one container as the pod-resources API lists it, with the
// indices of its GPUs (none for most containers).
type containerGPUs struct {
	name    string
	indices []int
}

// listedContainers are the containers the kubelet's pod-resources API lists:
// the restartable init containers (sidecars), then the app containers. Plain
// init containers have finished by the time the pod runs and are not listed.
func listedContainers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}

// gpuHolders is the key of the pod holding each GPU of node ("" when free).
// Called with r.mu held.
func (r *podRunner) gpuHolders(nodeName string) []string {
	holders, ok := r.gpus[nodeName]
	if !ok {
		q := r.nodes[nodeName].manifest.Status.Allocatable[gpuResource]
		holders = make([]string, max(q.Value(), 0))
		r.gpus[nodeName] = holders
	}
	return holders
}

// assignGPUs gives pod's listed containers their GPUs and records them in rec:
// the indices in prefer when they are exactly as many as requested and all free
// (the annotation of a pod being adopted), otherwise the lowest free ones. It
// returns how many GPUs the pod requested and how many were free, and ok false
// (nothing assigned) when the node has too few free GPUs. Called with r.mu held.
func (r *podRunner) assignGPUs(key string, rec *podRecord, pod *corev1.Pod, prefer []int) (requested, free int, ok bool) {
	containers := listedContainers(pod)
	want := 0
	for _, c := range containers {
		q := c.Resources.Requests[gpuResource]
		want += int(q.Value())
	}
	holders := r.gpuHolders(rec.node)
	bad := r.unhealthy[rec.node]
	var unheld []int
	for i, h := range holders {
		if h == "" && !bad[i] {
			unheld = append(unheld, i)
		}
	}
	if len(unheld) < want {
		return want, len(unheld), false
	}
	pick := unheld[:want]
	if len(prefer) == want && allFree(holders, prefer) { // a pod adopted after a restart keeps its GPUs
		pick = prefer
	}
	rec.containers = make([]containerGPUs, 0, len(containers))
	for _, c := range containers {
		q := c.Resources.Requests[gpuResource]
		n := int(q.Value())
		rec.containers = append(rec.containers, containerGPUs{name: c.Name, indices: slices.Clone(pick[:n])})
		for _, i := range pick[:n] {
			holders[i] = key
		}
		pick = pick[n:]
	}
	return want, len(unheld), true
}

// setUnhealthy records the node's GPUs out of service (from its annotation).
func (r *podRunner) setUnhealthy(node string, indices []int) {
	bad := map[int]bool{}
	for _, i := range indices {
		bad[i] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(bad) == 0 {
		delete(r.unhealthy, node)
	} else {
		r.unhealthy[node] = bad
	}
}

func allFree(holders []string, indices []int) bool {
	seen := map[int]bool{}
	for _, i := range indices {
		if i < 0 || i >= len(holders) || holders[i] != "" || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// releaseGPUs frees the GPUs rec holds. Called with r.mu held.
func (r *podRunner) releaseGPUs(rec *podRecord) {
	holders := r.gpus[rec.node]
	for _, c := range rec.containers {
		for _, i := range c.indices {
			holders[i] = ""
		}
	}
	rec.containers = nil
}

// gpuIndices is the annotationGPUIndices value for rec ("" without GPUs).
func gpuIndices(rec *podRecord) string {
	var parts []string
	for _, c := range rec.containers {
		for _, i := range c.indices {
			parts = append(parts, strconv.Itoa(i))
		}
	}
	return strings.Join(parts, ",")
}

// parseGPUIndices reads an annotationGPUIndices value; nil if it is malformed.
func parseGPUIndices(v string) []int {
	if v == "" {
		return nil
	}
	var out []int
	for _, p := range strings.Split(v, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil
		}
		out = append(out, i)
	}
	return out
}
