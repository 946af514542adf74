// Package kubecluster runs a real single-node Kubernetes cluster for tests
// (issue 57): etcd (Debian's etcd-server), kube-apiserver on
// https://127.0.0.1:6443, kube-controller-manager, kube-scheduler, a
// containerd of its own (the Debian containerd binary run a second time,
// with its own root, state, socket and configuration: Docker's containerd
// is never touched) and a kubelet whose node is named NodeName
// ("localhost"), with pods on a CNI bridge (PodSubnet, no masquerade).
//
// The Kubernetes binaries are built once into the tools cache by
// `make kubernetes` (internal/cmd/kubebinaries; about 12 minutes on 2
// cores with an empty build cache, plus the modules' download; nothing
// once built); without them a test skips, or fails under
// BERTH_REQUIRE_REAL=1. Starting to a Ready node takes 6 to 9 seconds
// (about 20 on a loaded machine), stopping about one; the cluster's
// ports are fixed, so one runs per machine at a time: a start takes a
// machine-wide lock (another test binary waits for it) and keeps it until
// the cluster stops. It must run as root.
//
// Stopping ends every process it started by PID (and the containerd shims
// of its containerd, with the pods' containers), unmounts what it mounted,
// deletes its bridge, its cgroups (under "berth-kubecluster" in every
// hierarchy) and any iptables chain the kubelet added, removes the host
// directories the kubelet creates whatever its configuration
// (/var/lib/kubelet/device-plugins, /var/log/containers) when they were
// absent before, and writes back the sysctls the kubelet changes
// (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops): then it
// compares the host with its state before the start and reports every
// difference. A test binary that dies without stopping its cluster is
// cleaned up after by the next start.
//
// Images reach pods in two ways: containerd pulls from a registry on
// 127.0.0.1 over plain HTTP (testenv.StartRegistry; images by digest), or
// ImportImage puts an image into containerd directly (the sandbox image is
// imported so).
//
// A package whose tests share one cluster (the usual case):
//
//	func TestMain(m *testing.M) { os.Exit(kubecluster.Main(m)) }
//
//	func TestPods(t *testing.T) {
//		c := kubecluster.Shared(t)             // started on first use, stopped by Main
//		kubeconfig := c.Kubeconfig()           // admin kubeconfig, certificates embedded
//		ns := c.Namespace(t, "pods")           // a fresh namespace, deleted after t
//		reg := testenv.StartRegistry(t, nil)   // pods pull reg.Host+"/repo@sha256:..."
//		...
//	}
//
// One cluster runs per machine, and a start costs tens of seconds, so a
// run of the whole suite starts one: in the one package that tests
// against it, whose tests share it (Shared) and one of which checks the
// cluster itself (SelfTest); Main stops it and reports what its teardown
// could not put back.
//
// A pod's image from the registry is named by digest,
// reg.Host+"/repo@"+digest, with imagePullPolicy IfNotPresent; its
// container status's imageID then ends in that digest. ImportImage(ctx, "example.test/x:1", img) makes img
// runnable as that tag or as "example.test/x@"+digest with imagePullPolicy
// Never. Pods in the cluster run as they would on a real node: runc,
// cgroup limits enforced, a pod network; no kube-proxy, DNS or Services.
package kubecluster
