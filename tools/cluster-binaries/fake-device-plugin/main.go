// A stand-in for the Neuron and EFA device plugins on the real nodes of tests/cluster
// (tests/cluster/real_nodes.py, tests/cluster/test_devices.py). A test-time tool: nothing deploys it.
//
// What it does as the real plugins do: it speaks the kubelet's device plugin API (k8s.io/kubelet
// deviceplugin v1beta1) over a socket in the kubelet's device-plugins directory, registers each
// resource it is given with the kubelet (Register on kubelet.sock), lists its devices Healthy
// (ListAndWatch), and answers Allocate with a DeviceSpec per allocated device (host path, container
// path, "rw"), as the Neuron plugin hands over /dev/neuron<N> and the EFA plugin
// /dev/infiniband/uverbs<N>, plus the environment the Neuron plugin sets (AWS_NEURON_VISIBLE_DEVICES
// for whole devices, NEURON_RT_VISIBLE_CORES for NeuronCores). The kubelet then passes the specs to
// containerd, and runc creates the device nodes in the container and allows them in its device
// cgroup: the same path a real device takes.
//
// What it leaves out: there is no hardware. Each device is a character device node this program
// creates in a directory of the node (--dir), with a major number no driver of the machine holds
// (--major): opening one fails (ENXIO), so nothing in a container can use it, only find it. It never
// reports a device Unhealthy, does not watch kubelet.sock to register again after a kubelet restart,
// ignores GetPreferredAllocation (no topology: the Neuron plugin prefers contiguous devices, which
// the Neuron scheduler extension also asks for), and has none of the real plugins' discovery (the
// devices' count is given, not read from the PCI bus or sysfs), node labels or metrics.
//
//	fake-device-plugin --plugin-dir <kubelet root>/device-plugins --dir <node>/devices --major 240 \
//	    --resource aws.amazon.com/neuron=16:/dev/neuron%d:AWS_NEURON_VISIBLE_DEVICES \
//	    --resource aws.amazon.com/neuroncore=32/2:/dev/neuron%d:NEURON_RT_VISIBLE_CORES \
//	    --resource vpc.amazonaws.com/efa=8:/dev/infiniband/uverbs%d
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type resource struct {
	name       string
	count      int    // devices advertised (IDs 0 .. count-1)
	perDevice  int    // IDs per device node: 2 NeuronCores of a trn1 chip share /dev/neuron<N>
	devicePath string // printf pattern of the device node's path, e.g. /dev/neuron%d
	env        string // the variable naming the allocated IDs, or ""
}

// node is the device node of an ID, the same path in the container as in --dir.
func (r resource) node(id int) string { return fmt.Sprintf(r.devicePath, id/r.perDevice) }

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource resource
	dir      string
	stop     chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	devices := make([]*pluginapi.Device, 0, p.resource.count)
	for i := 0; i < p.resource.count; i++ {
		devices = append(devices, &pluginapi.Device{ID: strconv.Itoa(i), Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		allocation := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		seen := map[string]bool{}
		for _, id := range container.DevicesIds {
			index, err := strconv.Atoi(id)
			if err != nil || index < 0 || index >= p.resource.count {
				return nil, fmt.Errorf("%s: no device %q", p.resource.name, id)
			}
			path := p.resource.node(index)
			if seen[path] {
				continue
			}
			seen[path] = true
			allocation.Devices = append(allocation.Devices, &pluginapi.DeviceSpec{
				ContainerPath: path,
				HostPath:      filepath.Join(p.dir, path),
				Permissions:   "rw",
			})
		}
		if p.resource.env != "" {
			allocation.Envs[p.resource.env] = strings.Join(container.DevicesIds, ",")
		}
		response.ContainerResponses = append(response.ContainerResponses, allocation)
	}
	log.Printf("%s: allocated %v", p.resource.name, request.ContainerRequests)
	return response, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// makeNodes creates the character device node of every device of every resource under dir, one
// minor number per distinct path (resources that share a device share its node).
func makeNodes(dir string, major uint32, list []resource) error {
	minors := map[string]uint32{}
	for _, r := range list {
		for id := 0; id < r.count; id++ {
			path := r.node(id)
			if _, ok := minors[path]; ok {
				continue
			}
			minors[path] = uint32(len(minors))
			host := filepath.Join(dir, path)
			if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
				return err
			}
			_ = os.Remove(host)
			if err := unix.Mknod(host, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minors[path]))); err != nil {
				return fmt.Errorf("mknod %s: %w", host, err)
			}
		}
	}
	return nil
}

// serve listens on the resource's socket in the kubelet's plugin directory and registers it.
func serve(pluginDir, dir string, r resource, stop chan struct{}) error {
	socketName := strings.NewReplacer("/", "-", ".", "-").Replace(r.name) + ".sock"
	socketPath := filepath.Join(pluginDir, socketName)
	_ = os.Remove(socketPath)
	listener, err := net.Listen("unix", socketPath)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, &plugin{resource: r, dir: dir, stop: stop})
	go func() { _ = server.Serve(listener) }()
	go func() { <-stop; server.Stop() }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socketName,
		ResourceName: r.name,
		Options:      &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", r.name, err)
	}
	log.Printf("%s: %d devices registered (socket %s)", r.name, r.count, socketPath)
	return nil
}

type resources []resource

func (r *resources) String() string { return fmt.Sprint(*r) }

// Set parses <name>=<count>[/<per device>]:<device path pattern>[:<variable>].
func (r *resources) Set(value string) error {
	name, rest, ok := strings.Cut(value, "=")
	parts := strings.Split(rest, ":")
	if !ok || len(parts) < 2 || len(parts) > 3 || !strings.Contains(parts[1], "%d") {
		return fmt.Errorf("--resource %q: want <name>=<count>[/<per device>]:<path with %%d>[:<variable>]", value)
	}
	countText, perText, shared := strings.Cut(parts[0], "/")
	count, err := strconv.Atoi(countText)
	if err != nil || count < 1 {
		return fmt.Errorf("--resource %q: the count must be a positive number", value)
	}
	per := 1
	if shared {
		if per, err = strconv.Atoi(perText); err != nil || per < 1 {
			return fmt.Errorf("--resource %q: the IDs per device must be a positive number", value)
		}
	}
	entry := resource{name: name, count: count, perDevice: per, devicePath: parts[1]}
	if len(parts) == 3 {
		entry.env = parts[2]
	}
	*r = append(*r, entry)
	return nil
}

func main() {
	pluginDir := flag.String("plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory")
	dir := flag.String("dir", "", "where the device nodes are created (<dir>/dev/neuron0 ...)")
	major := flag.Uint("major", 0, "the device nodes' major number: one no driver of this machine holds")
	var list resources
	flag.Var(&list, "resource", "<name>=<count>[/<per device>]:<device path pattern>[:<variable>] (repeatable)")
	flag.Parse()
	if len(list) == 0 || *dir == "" || *major == 0 {
		log.Fatal("--resource, --dir and --major are required")
	}
	if err := makeNodes(*dir, uint32(*major), list); err != nil {
		log.Fatal(err)
	}
	stop := make(chan struct{})
	for _, r := range list {
		if err := serve(*pluginDir, *dir, r, stop); err != nil {
			log.Fatal(err)
		}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
}
