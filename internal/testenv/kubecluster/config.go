package kubecluster

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The cluster's fixed addresses and names.
const (
	// NodeName is the name of the cluster's one node (the kubelet refuses a
	// loopback node IP; the API server reaches it by this host name).
	NodeName = "localhost"
	// APIServer is the URL of the cluster's API server.
	APIServer = "https://127.0.0.1:6443"
	// PodSubnet is the range the CNI bridge gives pods their addresses from.
	PodSubnet = "10.244.0.0/24"

	// bridgeName is the CNI bridge's interface.
	bridgeName = "berthkc0"
	// cgroupParent is the cgroup (in every v1 hierarchy) the kubelet puts
	// its kubepods tree under, so that one directory holds every cgroup
	// the cluster makes.
	cgroupParent = "berth-kubecluster"
	// pauseImage is the sandbox image's reference in containerd.
	pauseImage = "berth.local/kubecluster/pause:1"
)

// layout is the directories and files of one cluster under its base
// directory.
type layout struct{ base string }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.base}, elem...)...)
}
func (l layout) pki() string              { return l.path("pki") }
func (l layout) socket() string           { return l.path("containerd.sock") }
func (l layout) containerdConfig() string { return l.path("containerd.toml") }
func (l layout) kubeletRoot() string      { return l.path("kubelet") }
func (l layout) kubeconfig(who string) string {
	return l.path("kubeconfig", who+".yaml")
}
func (l layout) log(who string) string { return l.path("logs", who+".log") }

// writeConfigs writes every component's configuration (the certificates
// already exist in l.pki()).
func (l layout) writeConfigs() error {
	for _, d := range []string{"kubeconfig", "logs", "etcd", "containerd/root", "containerd/state", "containerd/opt",
		"certs.d", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(l.path(d), 0o700); err != nil {
			return err
		}
	}
	for who, cert := range map[string]string{
		"admin": "admin", "controller-manager": "controller-manager", "scheduler": "scheduler", "kubelet": "kubelet-client",
	} {
		b, err := l.kubeconfigYAML(cert)
		if err != nil {
			return err
		}
		if err := os.WriteFile(l.kubeconfig(who), b, 0o600); err != nil {
			return err
		}
	}
	files := map[string]string{
		l.containerdConfig(): l.containerdTOML(),
		l.path("cni/net.d/10-berthkc.conflist"): fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "berthkc",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, bridgeName, l.path("cni/ipam"), PodSubnet),
		l.path("kubelet.yaml"): l.kubeletYAML(),
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// containerdTOML is the second containerd's configuration: its own root,
// state, socket and plugin directories (never Docker's), the CRI plugin
// with runc through cgroupfs, oom_score_adj restricted (root here lacks
// CAP_SYS_RESOURCE, so a negative score fails every container), network
// namespaces under its state directory instead of /run/netns, the CNI
// bridge, and registries configured from a hosts directory (none there: a
// registry on 127.0.0.1 is then pulled from over plain HTTP).
func (l layout) containerdTOML() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, l.path("containerd/root"), l.path("containerd/state"), l.socket(), l.path("containerd/opt"),
		pauseImage, l.path("cni/net.d"), l.path("certs.d"))
}

// kubeletYAML is the kubelet's configuration: on loopback, x509 clients of
// the cluster's authority only, cgroupfs under cgroupParent, cgroup v1
// allowed, no iptables chains of its own, pod logs in the cluster's
// directory, and eviction thresholds low enough that a busy test machine's
// disk does not evict the tests' pods.
func (l layout) kubeletYAML() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %q
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
enableControllerAttachDetach: true
serializeImagePulls: false
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
fileCheckFrequency: 10s
`, l.path("pki/kubelet.crt"), l.path("pki/kubelet.key"), l.path("pki/ca.crt"), cgroupParent,
		l.socket(), l.path("pod-logs"))
}

// kubeconfigYAML is a kubeconfig for the API server with the certificate
// cert (and its key) and the authority embedded.
func (l layout) kubeconfigYAML(cert string) ([]byte, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(l.path("pki", name))
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	crt, err := read(cert + ".crt")
	if err != nil {
		return nil, err
	}
	key, err := read(cert + ".key")
	if err != nil {
		return nil, err
	}
	return []byte(strings.TrimLeft(fmt.Sprintf(`
apiVersion: v1
kind: Config
clusters:
- name: berth-kubecluster
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: berth-kubecluster
  context:
    cluster: berth-kubecluster
    user: %s
current-context: berth-kubecluster
`, APIServer, ca, cert, crt, key, cert), "\n")), nil
}
