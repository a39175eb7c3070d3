package main

// Nodes: registration, Lease heartbeats, and keeping the Ready condition True.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/version"
	"k8s.io/utils/ptr"
)

const leaseNamespace = "kube-node-lease"

// Fake addresses: nodes get 172.16.0.0/12, pods 10.128.0.0/9 (the launcher's
// service range is 10.0.0.0/24, so none of them overlap).
var (
	nodeIPBase = netip.MustParseAddr("172.16.0.0")
	podIPBase  = netip.MustParseAddr("10.128.0.0")
)

// addrAt is the IPv4 address offset addresses after base.
func addrAt(base netip.Addr, offset uint32) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += offset
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

type options struct {
	leaseDurationSeconds int32
	renewInterval        time.Duration
	workers              int
	podResourcesDir      string // see listenPodResources; "" for none
}

// node is what the fake kubelet knows of one of its nodes.
type node struct {
	manifest corev1.Node
	ip       string
}

type kubelet struct {
	cs    kubernetes.Interface
	opts  options
	nodes map[string]*node

	nodeLister corelisters.NodeLister
	nodeQueue  workqueue.TypedRateLimitingInterface[string]
	pods       *podRunner
	wg         sync.WaitGroup
}

func newKubelet(cs kubernetes.Interface, manifests []corev1.Node, opts options) *kubelet {
	k := &kubelet{
		cs:    cs,
		opts:  opts,
		nodes: make(map[string]*node, len(manifests)),
		nodeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes"},
		),
	}
	for i := range manifests {
		ip := addrAt(nodeIPBase, uint32(i+1))
		k.nodes[manifests[i].Name] = &node{manifest: manifests[i], ip: ip.String()}
	}
	k.pods = newPodRunner(cs, k.nodes)
	return k
}

// readyStatus is the status a healthy kubelet posts for n.
func (k *kubelet) readyStatus(n *node, now metav1.Time) corev1.NodeStatus {
	st := *n.manifest.Status.DeepCopy()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{
			Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now,
		}
	}
	st.Conditions = []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "fake-kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "fake-kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "fake-kubelet has sufficient PID available"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "fake-kubelet is posting ready status"),
	}
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.ip},
		{Type: corev1.NodeHostName, Address: n.manifest.Name},
	}
	st.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}}
	st.NodeInfo = corev1.NodeSystemInfo{
		MachineID:               n.manifest.Name,
		SystemUUID:              n.manifest.Name,
		BootID:                  n.manifest.Name,
		KernelVersion:           "fake",
		OSImage:                 "gangops fake-kubelet",
		ContainerRuntimeVersion: "fake://0",
		KubeletVersion:          version.Get().GitVersion,
		KubeProxyVersion:        "",
		OperatingSystem:         "linux",
		Architecture:            "amd64",
	}
	return st
}

// registerBackoff retries a registration for about a minute (the API server
// may still be starting, or briefly overloaded by a thousand registrations).
var registerBackoff = wait.Backoff{Steps: 20, Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second}

// retriable tells transient API errors from those a retry cannot fix.
func retriable(ctx context.Context) func(error) bool {
	return func(err error) bool {
		return ctx.Err() == nil && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) &&
			!apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err)
	}
}

// waitForAPI returns once the API server answers and has created the node
// lease namespace (it does so shortly after it starts).
func (k *kubelet) waitForAPI(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := k.cs.CoreV1().Namespaces().Get(ctx, leaseNamespace, metav1.GetOptions{})
		return err == nil, nil
	})
}

// registerAll creates (or refreshes) every Node and its Lease, in parallel.
func (k *kubelet) registerAll(ctx context.Context) error {
	names := make(chan string)
	errs := make(chan error, len(k.nodes))
	var wg sync.WaitGroup
	for range max(k.opts.workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				err := retry.OnError(registerBackoff, retriable(ctx), func() error {
					return k.register(ctx, k.nodes[name])
				})
				if err != nil {
					errs <- fmt.Errorf("node %s: %w", name, err)
				}
			}
		}()
	}
	for name := range k.nodes {
		names <- name
	}
	close(names)
	wg.Wait()
	close(errs)
	return <-errs // nil when the channel is empty
}

func (k *kubelet) register(ctx context.Context, n *node) error {
	now := metav1.Now()
	want := n.manifest.DeepCopy()
	want.Status = k.readyStatus(n, now)
	got, err := k.cs.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = k.cs.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Labels, got.Spec.Taints = want.Labels, want.Spec.Taints
		if got, err = k.cs.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return err
		}
		got.Status = want.Status
		got, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      n.manifest.Name,
			Namespace: leaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: got.Name, UID: got.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(n.manifest.Name),
			LeaseDurationSeconds: ptr.To(k.opts.leaseDurationSeconds),
			RenewTime:            &metav1.MicroTime{Time: now.Time},
		},
	}
	created, err := k.cs.CoordinationV1().Leases(leaseNamespace).Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := k.cs.CoordinationV1().Leases(leaseNamespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		existing.OwnerReferences, existing.Spec = lease.OwnerReferences, lease.Spec
		created, err = k.cs.CoordinationV1().Leases(leaseNamespace).Update(ctx, existing, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	k.wg.Add(1)
	go k.heartbeat(ctx, created)
	return nil
}

// heartbeat renews one node's Lease every renewInterval until ctx is done or
// the Node is deleted (a deleted node stays deleted, as with a real kubelet).
func (k *kubelet) heartbeat(ctx context.Context, lease *coordinationv1.Lease) {
	defer k.wg.Done()
	leases := k.cs.CoordinationV1().Leases(leaseNamespace)
	// Spread the renewals over the interval so 1,000 nodes do not renew at once.
	timer := time.NewTimer(rand.N(k.opts.renewInterval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case err == nil:
			lease = updated
			timer.Reset(k.opts.renewInterval)
			continue
		case ctx.Err() != nil:
			return
		case apierrors.IsNotFound(err):
			if _, nerr := k.cs.CoreV1().Nodes().Get(ctx, lease.Name, metav1.GetOptions{}); apierrors.IsNotFound(nerr) {
				slog.Info("node deleted; lease renewal stopped", "node", lease.Name)
				return
			}
			lease.ResourceVersion = ""
			if created, cerr := leases.Create(ctx, lease, metav1.CreateOptions{}); cerr == nil {
				lease = created
			}
		case apierrors.IsConflict(err):
			if fresh, gerr := leases.Get(ctx, lease.Name, metav1.GetOptions{}); gerr == nil {
				lease = fresh
			}
		default:
			slog.Warn("lease renewal failed", "node", lease.Name, "err", err)
		}
		timer.Reset(time.Second)
	}
}

// start runs the node and pod informers and their workers, and returns once
// their caches are synced.
func (k *kubelet) start(ctx context.Context) error {
	nodeInformers := informers.NewSharedInformerFactory(k.cs, 0)
	nodeInformer := nodeInformers.Core().V1().Nodes()
	k.nodeLister = nodeInformer.Lister()
	enqueue := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || k.nodes[n.Name] == nil {
			return
		}
		k.pods.setUnhealthy(n.Name, parseGPUIndices(n.Annotations[annotationUnhealthyGPUs]))
		if !isReady(n) {
			k.nodeQueue.Add(n.Name)
		}
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	nodeInformers.Start(ctx.Done())
	if err := k.pods.start(ctx); err != nil {
		return err
	}
	for typ, ok := range nodeInformers.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache for %v did not sync", typ)
		}
	}
	for range max(k.opts.workers/4, 1) {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			wait.UntilWithContext(ctx, k.nodeWorker, time.Second)
		}()
	}
	k.pods.run(ctx, &k.wg, k.opts.workers)
	return nil
}

func (k *kubelet) shutdown() {
	k.nodeQueue.ShutDown()
	k.pods.queue.ShutDown()
	k.wg.Wait()
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (k *kubelet) nodeWorker(ctx context.Context) {
	for {
		name, quit := k.nodeQueue.Get()
		if quit {
			return
		}
		err := k.restoreReady(ctx, name)
		if err != nil && ctx.Err() == nil {
			slog.Warn("restoring node status failed", "node", name, "err", err)
			k.nodeQueue.AddRateLimited(name)
		} else {
			k.nodeQueue.Forget(name)
		}
		k.nodeQueue.Done(name)
	}
}

// restoreReady posts a Ready status again for a node that the node lifecycle
// controller marked Unknown while this process was not renewing its Lease.
func (k *kubelet) restoreReady(ctx context.Context, name string) error {
	cur, err := k.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if isReady(cur) {
		return nil
	}
	n := cur.DeepCopy()
	want := k.readyStatus(k.nodes[name], metav1.Now())
	// Replace the kubelet's own conditions; keep everyone else's (the node agent's
	// GPUProblem, node-problem-detector's), as the kubelet's status patch does.
	own := map[corev1.NodeConditionType]bool{}
	for _, c := range want.Conditions {
		own[c.Type] = true
	}
	conditions := slices.Clone(want.Conditions)
	for _, c := range cur.Status.Conditions {
		if !own[c.Type] {
			conditions = append(conditions, c)
		}
	}
	n.Status.Conditions = conditions
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return err
	}
	slog.Info("node status restored to Ready", "node", name)
	return nil
}
