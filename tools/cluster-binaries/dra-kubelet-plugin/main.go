// A stand-in for one DRA driver's kubelet plugin (the Neuron DRA driver, neuron.aws.com, or the EFA
// DRA driver, DRANET's dra.net) on a real node of tests/cluster (tests/cluster/real_nodes.py,
// tests/cluster/test_dra_pods.py). A test-time tool: nothing deploys it. One process per driver, as
// each real driver is a DaemonSet of its own.
//
// What it does as the real drivers do: it uses the kubelet plugin library the drivers use
// (k8s.io/dynamic-resource-allocation kubeletplugin, at the kubelet's release v0.36.3): a
// registration socket in the kubelet's plugins_registry directory (the kubelet's plugin watcher finds
// it, calls GetInfo and connects to the DRA socket it names), the DRA node service (v1 and v1beta1,
// whichever the kubelet asks for), and the ResourceSlice controller that publishes the node's pool
// (named after the node, owned by the Node) through the API server. The slice's devices and their
// attributes are given (--config: the slice tests/cluster/dra.py builds, one home for them), not
// discovered. NodePrepareResources gets the claim's allocation (the library reads the ResourceClaim
// from the API server and checks it is allocated and reserved) and, for each device of this driver
// and pool, writes a CDI spec file (--cdi-dir, one per claim, named by the claim's UID) that injects
// the device's character device node and the claim's environment variable; it answers with the CDI
// device IDs, the kubelet hands them to containerd, containerd's CDI support edits the container's
// OCI spec, and runc creates the device nodes and allows them in the device cgroup: the path a real
// DRA device takes. NodeUnprepareResources removes the claim's spec file.
//
// What it leaves out of the real drivers: there is no hardware. Each device node is a character
// device this program creates (--dir) with a major number no driver holds (real_nodes.DEVICE_MAJOR):
// opening one fails (ENXIO). No discovery (PCI, sysfs, the Neuron driver's ioctl), no health
// monitoring or device taints, no ResourceSlice updates after the first publication. The drivers'
// opaque configuration (NeuronConfig's logicalNeuronCore, UltraServerConfig) is read by neither:
// a claim that carries one is prepared as if it did not (the real Neuron driver sets the LNC and the
// UltraServer mode from it). The Neuron driver's other container edits (its runtime's mounts, the
// NEURON_RT_* settings derived from the LNC) are not made; DRANET's network work (moving the RDMA
// interfaces into the pod's network namespace, its NRI hooks) is not done: only the uverbs device
// nodes are injected. No device metadata files (KEP-5304), no rolling update, and the process runs
// beside the kubelet, not as a pod: its credentials are the test's (--kubeconfig).
//
//	dra-kubelet-plugin --driver neuron.aws.com --node <node> --kubeconfig <file> \
//	    --registry-dir <kubelet root>/plugins_registry --plugin-dir <dir> --cdi-dir <dir> \
//	    --dir <node>/devices --major 240 --config <file>
//
// --config is JSON: {"slice": <a ResourceSlice, of which spec.devices is published>,
// "deviceNodes": {"<device>": {"path": "/dev/neuron0", "minor": 0}, ...},
// "env": {"<variable>": "<int attribute>"}}: each variable names, comma-separated, that attribute of
// the claim's devices of this driver (AWS_NEURON_VISIBLE_DEVICES: deviceId).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

type deviceNode struct {
	Path  string `json:"path"`
	Minor uint32 `json:"minor"`
}

type config struct {
	Slice struct {
		Spec struct {
			Devices []resourceapi.Device `json:"devices"`
		} `json:"spec"`
	} `json:"slice"`
	DeviceNodes map[string]deviceNode `json:"deviceNodes"`
	Env         map[string]string     `json:"env"`
}

type driver struct {
	name   string
	pool   string
	dir    string
	cdiDir string
	major  uint32
	config config
}

// kind is the CDI kind of the driver's devices, <vendor>/<class>.
func (d *driver) kind() string { return d.name + "/device" }

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-%s.json", d.name, claim))
}

func (d *driver) device(name string) (resourceapi.Device, bool) {
	for _, device := range d.config.Slice.Spec.Devices {
		if device.Name == name {
			return device, true
		}
	}
	return resourceapi.Device{}, false
}

type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Major       int64  `json:"major"`
	Minor       int64  `json:"minor"`
	Permissions string `json:"permissions"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	spec := cdiSpec{Version: "0.6.0", Kind: d.kind()}
	var result kubeletplugin.PrepareResult
	values := map[string][]string{}
	for _, allocated := range claim.Status.Allocation.Devices.Results {
		if allocated.Driver != d.name {
			continue
		}
		if allocated.Pool != d.pool {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s of pool %s is not this node's (%s)", allocated.Device, allocated.Pool, d.pool)}
		}
		device, ok := d.device(allocated.Device)
		node, hasNode := d.config.DeviceNodes[allocated.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("no device %s in the published slice", allocated.Device)}
		}
		// The CDI device's name carries the claim's UID: containerd caches specs, and a name used
		// again for another claim could find the old one (the library's advice).
		name := fmt.Sprintf("%s-%s", claim.UID, allocated.Device)
		edits := cdiEdits{}
		if hasNode {
			edits.DeviceNodes = []cdiDeviceNode{{
				Path:        node.Path,
				HostPath:    filepath.Join(d.dir, node.Path),
				Type:        "c",
				Major:       int64(d.major),
				Minor:       int64(node.Minor),
				Permissions: "rw",
			}}
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, ContainerEdits: edits})
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests:     []string{allocated.Request},
			PoolName:     allocated.Pool,
			DeviceName:   allocated.Device,
			CDIDeviceIDs: []string{d.kind() + "=" + name},
		})
		for variable, attribute := range d.config.Env {
			if value, ok := device.Attributes[resourceapi.QualifiedName(attribute)]; ok && value.IntValue != nil {
				values[variable] = append(values[variable], strconv.FormatInt(*value.IntValue, 10))
			}
		}
	}
	// The claim's variables in one CDI device of their own, given with the claim's first device:
	// set per device, each device's edit would replace the last one's value.
	if len(values) > 0 && len(result.Devices) > 0 {
		env := cdiDevice{Name: fmt.Sprintf("%s-env", claim.UID)}
		for variable, list := range values {
			sort.Slice(list, func(i, j int) bool { a, _ := strconv.Atoi(list[i]); b, _ := strconv.Atoi(list[j]); return a < b })
			env.ContainerEdits.Env = append(env.ContainerEdits.Env, variable+"="+strings.Join(list, ","))
		}
		sort.Strings(env.ContainerEdits.Env)
		spec.Devices = append(spec.Devices, env)
		result.Devices[0].CDIDeviceIDs = append(result.Devices[0].CDIDeviceIDs, d.kind()+"="+env.Name)
	}
	if len(spec.Devices) == 0 {
		return result
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err == nil {
		temporary := d.specPath(claim.UID) + ".tmp"
		if err = os.WriteFile(temporary, data, 0o644); err == nil {
			err = os.Rename(temporary, d.specPath(claim.UID))
		}
	}
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("writing the CDI spec of claim %s: %w", claim.UID, err)}
	}
	klog.InfoS("prepared", "claim", klog.KObj(claim), "uid", claim.UID, "devices", len(result.Devices), "spec", d.specPath(claim.UID))
	return result
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		results[claim.UID] = d.prepare(claim)
	}
	return results, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := map[types.UID]error{}
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		results[claim.UID] = err
		klog.InfoS("unprepared", "claim", claim.String(), "error", err)
	}
	return results, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// makeNodes creates the character device node of every device that has one, under dir.
func makeNodes(dir string, major uint32, nodes map[string]deviceNode) error {
	for _, node := range nodes {
		host := filepath.Join(dir, node.Path)
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			return err
		}
		_ = os.Remove(host)
		if err := unix.Mknod(host, unix.S_IFCHR|0o666, int(unix.Mkdev(major, node.Minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", host, err)
		}
	}
	return nil
}

func main() {
	klog.InitFlags(nil)
	name := flag.String("driver", "", "the DRA driver's name (neuron.aws.com, dra.net)")
	nodeName := flag.String("node", "", "the node's name: its pool's and its slice's")
	kubeconfig := flag.String("kubeconfig", "", "credentials for the API server")
	registryDir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	registrySocket := flag.String("registry-socket", "", "the registration socket's name (default <driver>-reg.sock)")
	pluginDir := flag.String("plugin-dir", "", "where the DRA socket is made (default /var/lib/kubelet/plugins/<driver>)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the CDI spec files are written (one of containerd's cdi_spec_dirs)")
	dir := flag.String("dir", "", "where the device nodes are created (<dir>/dev/neuron0 ...)")
	major := flag.Uint("major", 0, "the device nodes' major number: one no driver of this machine holds")
	configPath := flag.String("config", "", "the slice, the device nodes and the variables (JSON; see the top of main.go)")
	flag.Parse()
	if *name == "" || *nodeName == "" || *kubeconfig == "" || *dir == "" || *major == 0 || *configPath == "" {
		klog.Fatal("--driver, --node, --kubeconfig, --dir, --major and --config are required")
	}
	d := &driver{name: *name, pool: *nodeName, dir: *dir, cdiDir: *cdiDir, major: uint32(*major)}
	raw, err := os.ReadFile(*configPath)
	if err == nil {
		err = json.Unmarshal(raw, &d.config)
	}
	if err != nil {
		klog.Fatalf("--config %s: %v", *configPath, err)
	}
	if err := makeNodes(*dir, d.major, d.config.DeviceNodes); err != nil {
		klog.Fatal(err)
	}
	if err := os.MkdirAll(*cdiDir, 0o755); err != nil {
		klog.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		klog.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	node, err := client.CoreV1().Nodes().Get(ctx, *nodeName, metav1.GetOptions{})
	if err != nil {
		klog.Fatalf("the node %s: %v", *nodeName, err)
	}
	options := []kubeletplugin.Option{
		kubeletplugin.DriverName(*name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.RegistrarDirectoryPath(*registryDir),
	}
	if *registrySocket != "" {
		options = append(options, kubeletplugin.RegistrarSocketFilename(*registrySocket))
	}
	if *pluginDir != "" {
		if err := os.MkdirAll(*pluginDir, 0o750); err != nil {
			klog.Fatal(err)
		}
		options = append(options, kubeletplugin.PluginDataDirectoryPath(*pluginDir))
	}
	helper, err := kubeletplugin.Start(ctx, d, options...)
	if err != nil {
		klog.Fatalf("starting the kubelet plugin of %s: %v", *name, err)
	}
	defer helper.Stop()
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*nodeName: {Slices: []resourceslice.Slice{{Devices: d.config.Slice.Spec.Devices}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		klog.Fatalf("publishing the slice of %s: %v", *name, err)
	}
	klog.InfoS("serving", "driver", *name, "node", *nodeName, "devices", len(d.config.Slice.Spec.Devices))
	<-ctx.Done()
}
