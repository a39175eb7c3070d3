package main

// Pods: admission against the node's allocatable, Running, finishing on
// request or after a duration, and confirming deletions.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

const (
	annotationExit     = "gangops.ai/fake-exit"
	annotationDuration = "gangops.ai/fake-duration-seconds"
	annotationExitCode = "gangops.ai/fake-exit-code"

	// exitCodeTerminated is what a container killed by SIGTERM on deletion reports.
	exitCodeTerminated = 143
)

// podRecord is what the fake kubelet did with one pod.
type podRecord struct {
	key      string // namespace/name
	uid      types.UID
	node     string
	requests corev1.ResourceList
	started  metav1.Time
	podIP    string
	finished bool // a terminal phase was written and the resources released

	// The containers the pod-resources API lists and their GPUs (devices.go);
	// set while the pod is admitted and unfinished.
	containers []containerGPUs
}

type podRunner struct {
	cs     kubernetes.Interface
	nodes  map[string]*node
	lister corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	records map[string]*podRecord
	used    map[string]corev1.ResourceList   // per node, resources of admitted, unfinished pods
	active  map[string]map[string]*podRecord // per node, admitted, unfinished pods by key
	gpus    map[string][]string              // per node, the key of the pod holding each GPU index
	// per node, GPU indices out of service (the node agent's annotation): never given out
	unhealthy map[string]map[int]bool
	nextIP    atomic.Uint32
}

func newPodRunner(cs kubernetes.Interface, nodes map[string]*node) *podRunner {
	return &podRunner{
		cs:    cs,
		nodes: nodes,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"},
		),
		records:   map[string]*podRecord{},
		used:      map[string]corev1.ResourceList{},
		active:    map[string]map[string]*podRecord{},
		gpus:      map[string][]string{},
		unhealthy: map[string]map[int]bool{},
	}
}

// start runs the informer on pods bound to any node and waits for its cache.
func (r *podRunner) start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	informer := factory.Core().V1().Pods()
	r.lister = informer.Lister()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && r.nodes[p.Spec.NodeName] == nil {
			return
		}
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache for %v did not sync", typ)
		}
	}
	return nil
}

func (r *podRunner) run(ctx context.Context, wg *sync.WaitGroup, workers int) {
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, r.worker, time.Second)
		}()
	}
}

func (r *podRunner) worker(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		err := r.sync(ctx, key)
		switch {
		case err == nil:
			r.queue.Forget(key)
		case ctx.Err() != nil:
		default:
			slog.Warn("pod sync failed; retrying", "pod", key, "err", err)
			r.queue.AddRateLimited(key)
		}
		r.queue.Done(key)
	}
}

func (r *podRunner) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := r.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	rec := r.records[key]
	r.mu.Unlock()
	if rec != nil && rec.uid != pod.UID {
		r.forget(key)
		rec = nil
	}
	if pod.DeletionTimestamp != nil {
		return r.confirmDeletion(ctx, key, pod, rec)
	}
	if rec == nil {
		switch pod.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			return nil
		case corev1.PodRunning:
			rec = r.adopt(key, pod)
		default:
			if rec, err = r.admit(ctx, key, pod); err != nil || rec == nil {
				return err
			}
		}
	}
	if rec.finished {
		return nil
	}
	phase, code, after := finishing(pod, rec.started.Time, time.Now())
	if phase == "" {
		if after > 0 {
			r.queue.AddAfter(key, after)
		}
		return nil
	}
	if err := r.patchStatus(ctx, pod, terminatedStatus(pod, rec, r.nodes[rec.node].ip, phase, code)); err != nil {
		return err
	}
	r.finish(key)
	slog.Info("pod finished", "pod", key, "node", rec.node, "phase", phase, "exitCode", code)
	return nil
}

// admit checks the pod against its node's allocatable like the kubelet does;
// a pod that fits is reserved and moved to Running, one that does not fit is
// failed with reason OutOf<resource>. It returns nil when the pod was rejected.
// A rejected pod is recorded as finished, so it is never admitted later.
func (r *podRunner) admit(ctx context.Context, key string, pod *corev1.Pod) (*podRecord, error) {
	nodeName := pod.Spec.NodeName
	requests := podRequests(pod)
	r.mu.Lock()
	reason, message := r.fits(nodeName, requests)
	var rec *podRecord
	if reason == "" {
		rec = &podRecord{
			key:      key,
			uid:      pod.UID,
			node:     nodeName,
			requests: requests,
			started:  metav1.Now(),
		}
		if requested, free, ok := r.assignGPUs(key, rec, pod, nil); ok {
			rec.podIP = addrAt(podIPBase, r.nextIP.Add(1)).String()
			r.reserve(key, rec)
		} else {
			// Sidecars add to the GPUs a pod holds beyond what its effective request counts.
			reason = "OutOf" + string(gpuResource)
			message = fmt.Sprintf("Node didn't have enough free devices: %s, requested: %d, free: %d", gpuResource, requested, free)
			rec = nil
		}
	}
	r.mu.Unlock()
	if rec == nil {
		status := corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message}
		if err := r.patchStatus(ctx, pod, status); err != nil {
			return nil, err
		}
		// Remember the rejection: until the cache shows the pod Failed, a later sync
		// must not admit it after all.
		r.mu.Lock()
		r.records[key] = &podRecord{key: key, uid: pod.UID, node: nodeName, finished: true}
		r.mu.Unlock()
		slog.Info("pod rejected", "pod", key, "node", nodeName, "reason", reason, "message", message)
		return nil, nil
	}
	var annotations map[string]string
	if indices := gpuIndices(rec); indices != "" {
		annotations = map[string]string{annotationGPUIndices: indices}
	}
	if err := r.patch(ctx, pod, runningStatus(pod, rec, r.nodes[nodeName].ip), annotations); err != nil {
		r.forget(key)
		return nil, err
	}
	slog.Info("pod running", "pod", key, "node", nodeName, "gpus", gpuIndices(rec))
	return rec, nil
}

// adopt takes over a pod found Running (this process was restarted).
func (r *podRunner) adopt(key string, pod *corev1.Pod) *podRecord {
	rec := &podRecord{
		key:      key,
		uid:      pod.UID,
		node:     pod.Spec.NodeName,
		requests: podRequests(pod),
		started:  metav1.Now(),
		podIP:    pod.Status.PodIP,
	}
	if pod.Status.StartTime != nil {
		rec.started = *pod.Status.StartTime
	}
	r.mu.Lock()
	prefer := parseGPUIndices(pod.Annotations[annotationGPUIndices])
	if requested, free, ok := r.assignGPUs(key, rec, pod, prefer); !ok {
		slog.Warn("running pod adopted without its GPUs", "pod", key, "node", rec.node, "requested", requested, "free", free)
	}
	r.reserve(key, rec)
	r.mu.Unlock()
	return rec
}

// fits returns the kubelet's rejection reason and message, or "" if the pod
// fits. Called with r.mu held.
func (r *podRunner) fits(nodeName string, requests corev1.ResourceList) (string, string) {
	alloc := r.nodes[nodeName].manifest.Status.Allocatable
	used := r.used[nodeName]
	for name, want := range requests {
		if want.IsZero() {
			continue
		}
		capacity := alloc[name]
		total := used[name].DeepCopy()
		total.Add(want)
		if total.Cmp(capacity) > 0 {
			usedQ := used[name]
			return "OutOf" + string(name), fmt.Sprintf(
				"Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				name, amount(name, want), amount(name, usedQ), amount(name, capacity))
		}
	}
	return "", ""
}

func amount(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// reserve records rec and adds its requests to its node. Called with r.mu held.
func (r *podRunner) reserve(key string, rec *podRecord) {
	r.records[key] = rec
	if r.active[rec.node] == nil {
		r.active[rec.node] = map[string]*podRecord{}
	}
	r.active[rec.node][key] = rec
	used := r.used[rec.node]
	if used == nil {
		used = corev1.ResourceList{}
		r.used[rec.node] = used
	}
	for name, q := range rec.requests {
		total := used[name].DeepCopy()
		total.Add(q)
		used[name] = total
	}
}

// release gives a record's resources back to its node. Called with r.mu held.
func (r *podRunner) release(rec *podRecord) {
	if rec.finished {
		return
	}
	rec.finished = true
	delete(r.active[rec.node], rec.key)
	r.releaseGPUs(rec)
	used := r.used[rec.node]
	for name, q := range rec.requests {
		total := used[name].DeepCopy()
		total.Sub(q)
		used[name] = total
	}
}

// finish marks a pod terminal: its resources go back to the node.
func (r *podRunner) finish(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.records[key]; rec != nil {
		r.release(rec)
	}
}

// forget drops what is known of a pod that is gone or was replaced.
func (r *podRunner) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.records[key]; rec != nil {
		r.release(rec)
		delete(r.records, key)
	}
}

// confirmDeletion "stops the containers" of a pod being deleted: it writes a
// terminal status (as the kubelet does), then deletes the pod with grace
// period 0 so the API server removes it.
func (r *podRunner) confirmDeletion(ctx context.Context, key string, pod *corev1.Pod, rec *podRecord) error {
	if rec != nil && !rec.finished {
		if err := r.patchStatus(ctx, pod, terminatedStatus(pod, rec, r.nodes[rec.node].ip, corev1.PodFailed, exitCodeTerminated)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	r.forget(key)
	err := r.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// patchStatus writes status with the pod's UID as a precondition, like the
// kubelet's status manager.
func (r *podRunner) patchStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	return r.patch(ctx, pod, status, nil)
}

// patch is patchStatus that also adds annotations (the status subresource
// keeps metadata changes other than owner references and deletion).
func (r *podRunner) patch(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus, annotations map[string]string) error {
	metadata := map[string]any{"uid": pod.UID}
	if len(annotations) > 0 {
		metadata["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": metadata, "status": status})
	if err != nil {
		return err
	}
	_, err = r.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// podRequests is the pod's effective request: the larger of the sum over its
// containers and the largest init container, plus one "pods" slot.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Requests {
			total := out[name].DeepCopy()
			total.Add(q)
			out[name] = total
		}
	}
	for _, c := range pod.Spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	return out
}

// finishing reads the fake-* annotations: the terminal phase and exit code if
// the pod should finish now, or how long until it should.
func finishing(pod *corev1.Pod, started, now time.Time) (corev1.PodPhase, int32, time.Duration) {
	code := int32(0)
	if v, ok := pod.Annotations[annotationExitCode]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || n > 255 {
			slog.Warn("ignoring invalid annotation", "pod", pod.Namespace+"/"+pod.Name, "annotation", annotationExitCode, "value", v, "expected", "an integer 0..255")
		} else {
			code = int32(n)
		}
	}
	switch v := pod.Annotations[annotationExit]; v {
	case "":
	case string(corev1.PodSucceeded):
		return corev1.PodSucceeded, 0, 0
	case string(corev1.PodFailed):
		if code == 0 {
			code = 1
		}
		return corev1.PodFailed, code, 0
	default:
		slog.Warn("ignoring invalid annotation", "pod", pod.Namespace+"/"+pod.Name, "annotation", annotationExit, "value", v, "expected", "Succeeded or Failed")
	}
	v, ok := pod.Annotations[annotationDuration]
	if !ok {
		return "", 0, 0
	}
	seconds, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(seconds) || seconds < 0 {
		slog.Warn("ignoring invalid annotation", "pod", pod.Namespace+"/"+pod.Name, "annotation", annotationDuration, "value", v, "expected", "a number of seconds >= 0")
		return "", 0, 0
	}
	// Longer than a Duration holds (about 292 years, or Inf): as long as it holds. The
	// conversion would overflow, and the pod would finish at once.
	run := time.Duration(math.MaxInt64)
	if seconds < run.Seconds() {
		run = time.Duration(seconds * float64(time.Second))
	}
	if left := started.Add(run).Sub(now); left > 0 {
		return "", 0, left
	}
	if code == 0 {
		return corev1.PodSucceeded, 0, 0
	}
	return corev1.PodFailed, code, 0
}

func condition(t corev1.PodConditionType, ok bool, reason string, at metav1.Time) corev1.PodCondition {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: at}
}

func containerID(pod *corev1.Pod, name string) string {
	return fmt.Sprintf("fake://%s/%s", pod.UID, name)
}

func initStatuses(pod *corev1.Pod, rec *podRecord) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		out = append(out, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(pod, c.Name),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: rec.started, FinishedAt: rec.started,
				ContainerID: containerID(pod, c.Name),
			}},
		})
	}
	return out
}

func addresses(rec *podRecord, hostIP string) corev1.PodStatus {
	return corev1.PodStatus{
		HostIP:    hostIP,
		HostIPs:   []corev1.HostIP{{IP: hostIP}},
		PodIP:     rec.podIP,
		PodIPs:    []corev1.PodIP{{IP: rec.podIP}},
		StartTime: ptr.To(rec.started),
	}
}

func runningStatus(pod *corev1.Pod, rec *podRecord, hostIP string) corev1.PodStatus {
	st := addresses(rec, hostIP)
	st.Phase = corev1.PodRunning
	at := rec.started
	st.Conditions = []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, true, "", at),
		condition(corev1.PodInitialized, true, "", at),
		condition(corev1.PodReady, true, "", at),
		condition(corev1.ContainersReady, true, "", at),
		condition(corev1.PodScheduled, true, "", at),
	}
	st.InitContainerStatuses = initStatuses(pod, rec)
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: rec.started}},
		})
	}
	return st
}

func terminatedStatus(pod *corev1.Pod, rec *podRecord, hostIP string, phase corev1.PodPhase, code int32) corev1.PodStatus {
	st := addresses(rec, hostIP)
	st.Phase = phase
	now := metav1.Now()
	st.Conditions = []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, false, "", now),
		condition(corev1.PodInitialized, true, "", rec.started),
		condition(corev1.PodReady, false, "PodCompleted", now),
		condition(corev1.ContainersReady, false, "PodCompleted", now),
		condition(corev1.PodScheduled, true, "", rec.started),
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	st.InitContainerStatuses = initStatuses(pod, rec)
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(pod, c.Name),
			Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: rec.started, FinishedAt: now,
				ContainerID: containerID(pod, c.Name),
			}},
		})
	}
	return st
}
