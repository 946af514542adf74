package kubernetes

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

const pinned = "127.0.0.1:5000/berth/busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// kubeconfigInline is a kubeconfig with inline credentials only.
const kubeconfigInline = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "Y2E="}
users:
- name: u
  user: {token: "not-a-real-token"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func settingsOf(t *testing.T, raw map[string]any) *settings {
	t.Helper()
	d := newDriver(nil)
	s, err := d.parseConfig(raw)
	if err != nil {
		t.Fatalf("parseConfig(%v): %v", raw, err)
	}
	return s
}

func TestSchemaDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := newSchema().Normalize(map[string]any{"image": pinned})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{"image": pinned, "namespace": "default", "image_pull_policy": "IfNotPresent", "memory_limit": "1Gi",
		"run_as_non_root": false, "readonly_rootfs": false, "workdir": "/", "startup_timeout": "2m0s"}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("normalized defaults (-want +got):\n%s", diff)
	}
	kinds := map[string]config.Kind{"kubeconfig": config.KindSecret, "namespace": config.KindIdentity, "image": config.KindIdentity,
		"runtime_class_name": config.KindIdentity, "env": config.KindSecretMap, "labels": config.KindMetadata, "memory_limit": config.KindKnob}
	for f, k := range kinds {
		if got, ok := newSchema().Field(f); !ok || got.Kind != k {
			t.Errorf("field %q: kind %v (present %v), want %v", f, got.Kind, ok, k)
		}
	}
}

func TestSchemaRefusesUnsafeOrInvalidValues(t *testing.T) {
	t.Parallel()
	execPlugin := strings.Replace(kubeconfigInline, `user: {token: "not-a-real-token"}`,
		"user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [/tmp/pwned]}", 1)
	fileCert := strings.Replace(kubeconfigInline, `user: {token: "not-a-real-token"}`, `user: {client-certificate: /etc/shadow, client-key: /etc/shadow}`, 1)
	caFile := strings.Replace(kubeconfigInline, `certificate-authority-data: "Y2E="`, `certificate-authority: /etc/ssl/ca.pem`, 1)
	authProvider := strings.Replace(kubeconfigInline, `user: {token: "not-a-real-token"}`, "user:\n    auth-provider: {name: oidc}", 1)
	for _, tc := range []struct {
		name  string
		raw   map[string]any
		field string
	}{
		{"exec plugin in the kubeconfig", map[string]any{"image": pinned, "kubeconfig": execPlugin}, "kubeconfig"},
		{"auth provider in the kubeconfig", map[string]any{"image": pinned, "kubeconfig": authProvider}, "kubeconfig"},
		{"client certificate file", map[string]any{"image": pinned, "kubeconfig": fileCert}, "kubeconfig"},
		{"certificate authority file", map[string]any{"image": pinned, "kubeconfig": caFile}, "kubeconfig"},
		{"not a kubeconfig", map[string]any{"image": pinned, "kubeconfig": "{{{"}, "kubeconfig"},
		{"bad namespace", map[string]any{"image": pinned, "namespace": "Not_A_Namespace"}, "namespace"},
		{"missing image", map[string]any{}, "image"},
		{"bad image", map[string]any{"image": "Not A Reference"}, "image"},
		{"bad pull policy", map[string]any{"image": pinned, "image_pull_policy": "Sometimes"}, "image_pull_policy"},
		{"bad memory", map[string]any{"image": pinned, "memory_limit": "lots"}, "memory_limit"},
		{"negative cpu", map[string]any{"image": pinned, "cpu_limit": "-1"}, "cpu_limit"},
		{"request above limit", map[string]any{"image": pinned, "memory_request": "2Gi", "memory_limit": "1Gi"}, "memory_request"},
		{"reserved label", map[string]any{"image": pinned, "labels": map[string]any{"berth.managed": "x"}}, "labels"},
		{"invalid label value", map[string]any{"image": pinned, "labels": map[string]any{"team": "a b"}}, "labels"},
		{"bad toleration effect", map[string]any{"image": pinned, "tolerations": []any{"gpu=yes:Sometimes"}}, "tolerations"},
		{"bad node selector", map[string]any{"image": pinned, "node_selector": map[string]any{"bad key!": "x"}}, "node_selector"},
		{"bad runtime class", map[string]any{"image": pinned, "runtime_class_name": "Not Valid"}, "runtime_class_name"},
		{"named user", map[string]any{"image": pinned, "user": "root"}, "user"},
		{"readonly root with workdir /", map[string]any{"image": pinned, "readonly_rootfs": true}, "workdir"},
		{"relative workdir", map[string]any{"image": pinned, "workdir": "work"}, "workdir"},
		{"env name a shell cannot export", map[string]any{"image": pinned, "env": map[string]any{"A-B": "x"}}, "env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := newSchema().Normalize(tc.raw)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Normalize: err = %v, want a config.Error on %q", err, tc.field)
			}
			if strings.Contains(err.Error(), "not-a-real-token") || strings.Contains(err.Error(), "/tmp/pwned") {
				t.Errorf("the error quotes the kubeconfig: %v", err)
			}
		})
	}
	if _, err := newSchema().Normalize(map[string]any{"image": pinned, "kubeconfig": kubeconfigInline,
		"tolerations": []any{"gpu=yes:NoSchedule", "dedicated:NoExecute", "spot"}, "node_selector": map[string]any{"kubernetes.io/arch": "amd64"}}); err != nil {
		t.Errorf("a valid config: %v", err)
	}
}

// The pod a hostile task runs in cannot be used against the cluster: no
// service account token, all capabilities dropped, no privilege
// escalation, never privileged, no host namespace, no host path, and no
// secret anywhere in the spec.
func TestPodSpecIsHardened(t *testing.T) {
	t.Parallel()
	cfg := settingsOf(t, map[string]any{"image": pinned, "kubeconfig": kubeconfigInline, "env": map[string]any{"API_TOKEN": "s3cret-value"},
		"labels": map[string]any{"team": "agents"}})
	pod := podSpec(cfg, "berth-abc", drivers.AcquireRequest{LeaseID: "lease-1", Labels: map[string]string{"berth.instance": "i1"}})
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken = %v, want false", spec.AutomountServiceAccountToken)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC || (spec.HostUsers != nil && *spec.HostUsers) {
		t.Errorf("a host namespace is shared: network %v pid %v ipc %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %q is a host path", v.Name)
		}
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 || len(spec.EphemeralContainers) != 0 {
		t.Fatalf("containers %d init %d, want one container", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop ALL and add none", sc)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged {
		t.Errorf("allowPrivilegeEscalation %v privileged %v, want false, false", sc.AllowPrivilegeEscalation, sc.Privileged)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp %+v, want RuntimeDefault", sc.SeccompProfile)
	}
	if c.Image != pinned || c.ImagePullPolicy != corev1.PullIfNotPresent || len(c.Env) != 0 || len(c.EnvFrom) != 0 {
		t.Errorf("image %q policy %q env %v envFrom %v", c.Image, c.ImagePullPolicy, c.Env, c.EnvFrom)
	}
	if lim := c.Resources.Limits[corev1.ResourceMemory]; lim.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("memory limit %v, want 1Gi", lim.String())
	}
	wantLabels := map[string]string{"team": "agents", "berth.instance": "i1", "berth.managed": "true", "berth.lease": "lease-1"}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	// No secret in any part of the pod: neither the env's value nor the kubeconfig's token.
	dump := pod.String()
	for _, secret := range []string{"s3cret-value", "not-a-real-token", "API_TOKEN"} {
		if strings.Contains(dump, secret) {
			t.Errorf("the pod spec holds %q", secret)
		}
	}
}

func TestPodSpecKnobs(t *testing.T) {
	t.Parallel()
	cfg := settingsOf(t, map[string]any{"image": pinned, "image_pull_policy": "Never", "cpu_request": "250m", "cpu_limit": "1",
		"memory_request": "128Mi", "memory_limit": "256Mi", "runtime_class_name": "gvisor", "node_selector": map[string]any{"pool": "agents"},
		"tolerations": []any{"gpu=yes:NoSchedule", "spot"}, "run_as_non_root": true, "user": "1000:2000", "readonly_rootfs": true, "workdir": "/workspace"})
	pod := podSpec(cfg, "berth-abc", drivers.AcquireRequest{})
	c := pod.Spec.Containers[0]
	if c.ImagePullPolicy != corev1.PullNever || *pod.Spec.RuntimeClassName != "gvisor" || pod.Spec.NodeSelector["pool"] != "agents" {
		t.Errorf("pull %q runtime class %v node selector %v", c.ImagePullPolicy, pod.Spec.RuntimeClassName, pod.Spec.NodeSelector)
	}
	want := []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule},
		{Key: "spot", Operator: corev1.TolerationOpExists}}
	if diff := cmp.Diff(want, pod.Spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	sc := c.SecurityContext
	if !*sc.RunAsNonRoot || *sc.RunAsUser != 1000 || *sc.RunAsGroup != 2000 || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v", sc)
	}
	for res, q := range map[string]string{"cpu request": c.Resources.Requests.Cpu().String(), "cpu limit": c.Resources.Limits.Cpu().String(),
		"memory request": c.Resources.Requests.Memory().String(), "memory limit": c.Resources.Limits.Memory().String()} {
		if want := map[string]string{"cpu request": "250m", "cpu limit": "1", "memory request": "128Mi", "memory limit": "256Mi"}[res]; q != want {
			t.Errorf("%s %s, want %s", res, q, want)
		}
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	if !mounts["/tmp"] || !mounts["/workspace"] || c.WorkingDir != "/workspace" {
		t.Errorf("read-only root: mounts %v workdir %q, want /tmp and /workspace writable", mounts, c.WorkingDir)
	}
	if pod.Spec.SecurityContext == nil || *pod.Spec.SecurityContext.FSGroup != 2000 {
		t.Errorf("fsGroup %+v, want 2000 so the user writes its emptyDirs", pod.Spec.SecurityContext)
	}
	if got := newDriver(nil).Isolation(config.Config{"runtime_class_name": "gvisor"}); got != drivers.IsolationGVisor {
		t.Errorf("isolation of runtime class gvisor: %v", got)
	}
	if got := newDriver(nil).Isolation(config.Config{}); got != drivers.IsolationContainer {
		t.Errorf("isolation without runtime class: %v", got)
	}
}

// The env preamble, read by the wrapper in a real sh, gives each variable
// its value byte for byte: newlines, backslashes, quotes, percent signs.
func TestEnvPreambleRoundTripsThroughSh(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	env := map[string]string{"A": "plain", "B": "two\nlines\n", "C": `back\slash \n %s %b '"$HOME"`, "D": "", "E": "tab\there\x01"}
	pre, err := envPreamble(env)
	if err != nil {
		t.Fatal(err)
	}
	for k := range env {
		if strings.Contains(strings.Join([]string{wrapperScript}, ""), env[k]) && env[k] != "" {
			t.Fatalf("test value %q appears in the script", env[k])
		}
	}
	argv := []string{"sh", "-c", `printf '%s\0' "$A" "$B" "$C" "$D" "$E"; cat; exit 5`}
	// A command with stdin of its own (no nonce) is exec'd and reads what
	// follows the preamble.
	cmd := exec.Command(sh, append([]string{"-c", wrapperScript, "berth-exec", "/", "1", ""}, argv...)...)
	cmd.Stdin = strings.NewReader(string(pre) + "stdin after\n")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if cmd.ProcessState.ExitCode() != 5 {
		t.Fatalf("wrapper: %v", err)
	}
	got := strings.Split(string(out), "\x00")
	want := []string{env["A"], env["B"], env["C"], env["D"], env["E"], "stdin after\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values and stdin after the wrapper (-want +got):\n%s", diff)
	}
	// One without (a nonce) reads /dev/null; the wrapper ends each stream
	// with the mark and exits with the command's status once its own
	// stdin has ended.
	cmd = exec.Command(sh, append([]string{"-c", wrapperScript, "berth-exec", "/", "1", "n0nce"}, argv...)...)
	cmd.Stdin = strings.NewReader(string(pre) + "the host's answer\n")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if cmd.ProcessState.ExitCode() != 5 {
		t.Fatalf("wrapper with a nonce: %v", err)
	}
	mark := string(endMark("n0nce"))
	want = []string{env["A"], env["B"], env["C"], env["D"], env["E"], ""}
	if got, ok := strings.CutSuffix(string(out), mark); !ok || cmp.Diff(want, strings.Split(got, "\x00")) != "" || stderr.String() != mark {
		t.Errorf("wrapper with a nonce: stdout %q, stderr %q; want the values, then the mark %q on each", out, stderr.String(), mark)
	}
}

func TestIdentityOf(t *testing.T) {
	t.Parallel()
	dig := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct{ imageID, want string }{
		{"127.0.0.1:5000/berth/busybox@" + dig, "127.0.0.1:5000/berth/busybox@" + dig},
		{"docker-pullable://docker.io/library/busybox@" + dig, "index.docker.io/library/busybox@" + dig},
	} {
		id, err := identityOf(tc.imageID)
		if err != nil || id.String() != tc.want {
			t.Errorf("identityOf(%q) = %v, %v; want %s", tc.imageID, id, err, tc.want)
		}
	}
	for _, bad := range []string{"", dig} {
		if _, err := identityOf(bad); err == nil {
			t.Errorf("identityOf(%q) succeeded", bad)
		}
	}
}
