package kubernetes

import (
	"maps"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthdev/berth/drivers"
)

// Labels the driver puts on every pod, on top of the AcquireRequest's and
// the config's extra labels.
const (
	// labelManaged marks pods made by berth ("true"). List and Destroy
	// only ever touch pods that carry it.
	labelManaged = "berth.managed"
	// labelLease holds the berth lease id of AcquireRequest.LeaseID
	// (when it is a valid label value; berth's lease ids are).
	labelLease = "berth.lease"
)

// containerName is the name of the pod's one container.
const containerName = "sandbox"

// idleScript is the container's main process: it idles until the pod is
// deleted and exits at once on TERM, so that a delete is fast; it reaps
// the orphans of killed commands (its wait collects any child).
const idleScript = `trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done`

// terminationGrace is the pod's terminationGracePeriodSeconds: the idle
// loop exits on TERM at once, a command left behind gets this long.
const terminationGrace = 2

// podSpec returns the hardened pod for cfg and req: one container of the
// configured image running idleScript, no service account token, all
// capabilities dropped, no privilege escalation, never privileged, no
// host namespace or host path, the RuntimeDefault seccomp profile, the
// knobs' resources, runtime class, node selector, tolerations, user and
// read-only root. It holds no environment variable and no secret: the
// config's env goes to each exec. name is the pod's name.
func podSpec(cfg *settings, name string, req drivers.AcquireRequest) *corev1.Pod {
	labels := make(map[string]string, len(cfg.labels)+len(req.Labels)+2)
	maps.Copy(labels, cfg.labels)
	maps.Copy(labels, req.Labels)
	labels[labelManaged] = "true"
	if req.LeaseID != "" {
		labels[labelLease] = labelValue(req.LeaseID)
	}
	no, yes := false, true
	grace := int64(terminationGrace)
	sc := &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		ReadOnlyRootFilesystem:   &cfg.readonly,
		RunAsUser:                cfg.uid,
		RunAsGroup:               cfg.gid,
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if cfg.nonRoot {
		sc.RunAsNonRoot = &yes
	}
	c := corev1.Container{
		Name:            containerName,
		Image:           cfg.image,
		ImagePullPolicy: cfg.pullPolicy,
		Command:         []string{"/bin/sh", "-c", idleScript},
		WorkingDir:      cfg.workdir,
		Resources:       cfg.resources,
		SecurityContext: sc,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			TerminationGracePeriodSeconds: &grace,
			NodeSelector:                  maps.Clone(cfg.nodeSelector),
			Tolerations:                   cfg.tolerations,
		},
	}
	if cfg.runtimeClass != "" {
		rc := cfg.runtimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if cfg.readonly {
		addScratch(pod, cfg)
	}
	if req.Runner != nil {
		addRunnerVolume(pod)
	}
	return pod
}

// addScratch gives a read-only root its writable places: emptyDir
// volumes at /tmp and at the workdir.
func addScratch(pod *corev1.Pod, cfg *settings) {
	c := &pod.Spec.Containers[0]
	mounts := []struct{ name, dir string }{{"tmp", "/tmp"}}
	if wd := path.Clean(cfg.workdir); wd != "/" && wd != "/tmp" {
		mounts = append(mounts, struct{ name, dir string }{"workdir", wd})
	}
	for _, m := range mounts {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: m.name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: m.dir})
	}
	if cfg.uid != nil {
		// emptyDir is root's: fsGroup makes it the group's to write.
		g := *cfg.uid
		if cfg.gid != nil {
			g = *cfg.gid
		}
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &g}
	}
}

// labelValue returns s as a label value: kept when it is one (berth's
// lease ids are), else reduced to the characters a label value may hold,
// at most 63, beginning and ending alphanumeric.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	out := string(b)
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "-_.")
}
