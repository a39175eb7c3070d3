package main

// The kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1),
// which node agents such as dcgm-exporter read to learn which pod holds which
// GPU. A real kubelet serves it on /var/lib/kubelet/pod-resources/kubelet.sock;
// this process serves every fake node at once: one gRPC server, one unix socket
// per node (<dir>/<node>.sock), and a call's node is the socket it came in on.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/cache"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// maxSocketPath is the longest path a unix socket can be bound to on Linux
// (sockaddr_un.sun_path is 108 bytes, the terminating NUL included).
const maxSocketPath = 107

// podResourcesSocket is where node's pod-resources API is served under dir.
func podResourcesSocket(dir, node string) string {
	return filepath.Join(dir, node+".sock")
}

type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods      *podRunner
	server    *grpc.Server
	listeners []net.Listener
}

// listenPodResources binds one socket per node under dir (created if needed;
// a socket left by an earlier run is replaced). Nothing is served before serve.
func listenPodResources(dir string, nodes []string, pods *podRunner) (*podResourcesServer, error) {
	for _, n := range nodes {
		if p := podResourcesSocket(dir, n); len(p) > maxSocketPath {
			return nil, fmt.Errorf("--pod-resources-dir: the socket path %s is %d bytes, longer than the %d a unix socket allows; choose a shorter directory", p, len(p), maxSocketPath)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--pod-resources-dir: %w", err)
	}
	s := &podResourcesServer{pods: pods, server: grpc.NewServer()}
	podresourcesv1.RegisterPodResourcesListerServer(s.server, s)
	for _, n := range nodes {
		p := podResourcesSocket(dir, n)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.close()
			return nil, err
		}
		l, err := net.Listen("unix", p)
		if err != nil {
			s.close()
			return nil, err
		}
		s.listeners = append(s.listeners, nodeListener{Listener: l, node: n})
	}
	return s, nil
}

// serve answers calls on every socket until stop.
func (s *podResourcesServer) serve() {
	for _, l := range s.listeners {
		go func() { _ = s.server.Serve(l) }()
	}
}

// stop ends every call and removes the sockets.
func (s *podResourcesServer) stop() {
	s.server.Stop()
	s.close()
}

func (s *podResourcesServer) close() {
	for _, l := range s.listeners {
		_ = l.Close()
	}
}

// nodeListener tags each connection with the node whose socket accepted it.
type nodeListener struct {
	net.Listener
	node string
}

func (l nodeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return nodeConn{Conn: c, addr: nodeAddr{Addr: c.LocalAddr(), node: l.node}}, nil
}

type nodeConn struct {
	net.Conn
	addr nodeAddr
}

// LocalAddr is what gRPC hands the handlers as peer.Peer.LocalAddr.
func (c nodeConn) LocalAddr() net.Addr { return c.addr }

type nodeAddr struct {
	net.Addr
	node string
}

func nodeOf(ctx context.Context) (string, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.LocalAddr.(nodeAddr); ok {
			return a.node, nil
		}
	}
	return "", status.Error(codes.Internal, "call not received on a node's socket")
}

// List returns the pods admitted on the node and not finished, with the GPUs of
// their containers, as the kubelet does (KubeletPodResourcesListUseActivePods).
func (s *podResourcesServer) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	node, err := nodeOf(ctx)
	if err != nil {
		return nil, err
	}
	s.pods.mu.Lock()
	defer s.pods.mu.Unlock()
	active := s.pods.active[node]
	keys := make([]string, 0, len(active))
	for k := range active {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := &podresourcesv1.ListPodResourcesResponse{PodResources: make([]*podresourcesv1.PodResources, 0, len(keys))}
	for _, k := range keys {
		out.PodResources = append(out.PodResources, podResources(node, active[k]))
	}
	return out, nil
}

// Get returns one pod of the node, as List shows it.
func (s *podResourcesServer) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	node, err := nodeOf(ctx)
	if err != nil {
		return nil, err
	}
	s.pods.mu.Lock()
	defer s.pods.mu.Unlock()
	rec := s.pods.active[node][req.PodNamespace+"/"+req.PodName]
	if rec == nil {
		return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", req.PodName, req.PodNamespace)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: podResources(node, rec)}, nil
}

// GetAllocatableResources lists every GPU of the node, one entry per device as
// the kubelet's device manager does (fake GPUs have no NUMA topology).
func (s *podResourcesServer) GetAllocatableResources(ctx context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	node, err := nodeOf(ctx)
	if err != nil {
		return nil, err
	}
	s.pods.mu.Lock()
	n := len(s.pods.gpuHolders(node))
	s.pods.mu.Unlock()
	out := &podresourcesv1.AllocatableResourcesResponse{}
	for i := range n {
		out.Devices = append(out.Devices, gpuDevices(node, []int{i})...)
	}
	return out, nil
}

// podResources is rec as the API shows it. Called with the runner's lock held.
func podResources(node string, rec *podRecord) *podresourcesv1.PodResources {
	ns, name, _ := cache.SplitMetaNamespaceKey(rec.key)
	out := &podresourcesv1.PodResources{Name: name, Namespace: ns}
	for _, c := range rec.containers {
		out.Containers = append(out.Containers, &podresourcesv1.ContainerResources{
			Name:    c.name,
			Devices: gpuDevices(node, c.indices),
		})
	}
	return out
}

// gpuDevices are the entries for the GPUs at indices: one ContainerDevices per
// device, as the kubelet's device manager reports them.
func gpuDevices(node string, indices []int) []*podresourcesv1.ContainerDevices {
	out := make([]*podresourcesv1.ContainerDevices, 0, len(indices))
	for _, i := range indices {
		out = append(out, &podresourcesv1.ContainerDevices{
			ResourceName: string(gpuResource),
			DeviceIds:    []string{fakeGPUUUID(node, i)},
		})
	}
	return out
}
