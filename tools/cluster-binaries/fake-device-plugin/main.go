// A stand-in device plugin for the real nodes of tests/cluster (tests/cluster/real_nodes.py): it
// speaks the kubelet's device plugin API (k8s.io/kubelet deviceplugin v1beta1) over its socket,
// exactly as the Neuron and EFA device plugins do, and registers each resource it is given with the
// kubelet. Each device is a file standing for the device node: Allocate mounts the files of the
// allocated devices into the container at the device's path (the real plugins hand the kubelet
// device nodes, /dev/neuron<N> and /dev/infiniband/uverbs<N>, which a file cannot be) and sets the
// environment the real plugin sets. A test-time tool: nothing deploys it.
//
//	fake-device-plugin --plugin-dir <kubelet root>/device-plugins \
//	    --resource aws.amazon.com/neuron=16:/dev/neuron%d:<dir> --env aws.amazon.com/neuron=AWS_NEURON_VISIBLE_DEVICES
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type resource struct {
	name       string
	count      int
	devicePath string // printf pattern of the path inside the container, e.g. /dev/neuron%d
	backing    string // the directory of this machine holding a file per device
	env        string // the variable naming the allocated devices' indices, or ""
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource resource
	stop     chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) devices() []*pluginapi.Device {
	devices := make([]*pluginapi.Device, 0, p.resource.count)
	for i := 0; i < p.resource.count; i++ {
		devices = append(devices, &pluginapi.Device{ID: strconv.Itoa(i), Health: pluginapi.Healthy})
	}
	return devices
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
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
		for _, id := range container.DevicesIds {
			index, err := strconv.Atoi(id)
			if err != nil || index < 0 || index >= p.resource.count {
				return nil, fmt.Errorf("%s: no device %q", p.resource.name, id)
			}
			allocation.Mounts = append(allocation.Mounts, &pluginapi.Mount{
				ContainerPath: fmt.Sprintf(p.resource.devicePath, index),
				HostPath:      filepath.Join(p.resource.backing, id),
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

// serve listens on the plugin's socket in the kubelet's plugin directory and registers it.
func serve(pluginDir string, r resource, stop chan struct{}) error {
	if err := os.MkdirAll(r.backing, 0o755); err != nil {
		return err
	}
	for i := 0; i < r.count; i++ {
		file := filepath.Join(r.backing, strconv.Itoa(i))
		if err := os.WriteFile(file, []byte(fmt.Sprintf("%s device %d (a file standing for it)\n", r.name, i)), 0o666); err != nil {
			return err
		}
	}
	socketName := strings.NewReplacer("/", "-", ".", "-").Replace(r.name) + ".sock"
	socketPath := filepath.Join(pluginDir, socketName)
	_ = os.Remove(socketPath)
	listener, err := net.Listen("unix", socketPath)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, &plugin{resource: r, stop: stop})
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
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", r.name, err)
	}
	log.Printf("%s: %d devices registered (socket %s)", r.name, r.count, socketPath)
	return nil
}

type resources []resource

func (r *resources) String() string { return fmt.Sprint(*r) }

// Set parses <name>=<count>:<device path pattern>:<backing directory>.
func (r *resources) Set(value string) error {
	name, rest, ok := strings.Cut(value, "=")
	parts := strings.SplitN(rest, ":", 3)
	if !ok || len(parts) != 3 {
		return fmt.Errorf("--resource %q: want <name>=<count>:<device path pattern>:<backing directory>", value)
	}
	count, err := strconv.Atoi(parts[0])
	if err != nil || count < 1 {
		return fmt.Errorf("--resource %q: the count must be a positive number", value)
	}
	*r = append(*r, resource{name: name, count: count, devicePath: parts[1], backing: parts[2]})
	return nil
}

func main() {
	pluginDir := flag.String("plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory")
	var list resources
	flag.Var(&list, "resource", "<name>=<count>:<device path pattern>:<backing directory> (repeatable)")
	envs := flag.String("env", "", "<name>=<variable>,...: the variable that names a resource's allocated devices")
	flag.Parse()
	if len(list) == 0 {
		log.Fatal("no --resource given")
	}
	for _, pair := range strings.Split(*envs, ",") {
		name, variable, ok := strings.Cut(pair, "=")
		for i := range list {
			if ok && list[i].name == name {
				list[i].env = variable
			}
		}
	}
	stop := make(chan struct{})
	for _, r := range list {
		if err := serve(*pluginDir, r, stop); err != nil {
			log.Fatal(err)
		}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
}
