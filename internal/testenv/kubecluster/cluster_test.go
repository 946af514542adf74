package kubecluster

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/internal/testenv"
)

// TestClusterRunsAPodAndPutsTheHostBack starts a cluster of its own, runs a
// pod from the loopback registry by digest, then stops the cluster and
// checks the host is as it was before the start.
func TestClusterRunsAPodAndPutsTheHostBack(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("a pod pulls its image by digest from the loopback registry", func(t *testing.T) {
		reg := testenv.StartRegistry(t, nil)
		prog, err := os.ReadFile(c.dir.path("pause"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := FileImage(map[string][]byte{"sleeper": prog, "marker": []byte(t.Name())}, []string{"/sleeper"})
		if err != nil {
			t.Fatal(err)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		tag, err := name.ParseReference(reg.Host + "/kubecluster/sleeper:1")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img); err != nil {
			t.Fatal(err)
		}
		ns := c.Namespace(t, "kubecluster")
		running, deleted, imageID := runPod(ctx, t, c, ns, reg.Host+"/kubecluster/sleeper@"+digest.String(), "IfNotPresent", false)
		if !strings.HasSuffix(imageID, "@"+digest.String()) {
			t.Errorf("the container's imageID is %q, want it to end in @%s", imageID, digest)
		}
		if reg.ManifestGets() == 0 {
			t.Errorf("the registry served no manifest: the image did not come from it")
		}
		t.Logf("create to Running (pull included): %s; delete to NotFound: %s", running, deleted)
	})

	t.Run("an imported image runs by digest", func(t *testing.T) {
		prog, err := os.ReadFile(c.dir.path("pause"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := FileImage(map[string][]byte{"sleeper": prog, "marker": []byte(t.Name())}, []string{"/sleeper"})
		if err != nil {
			t.Fatal(err)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ImportImage(ctx, "berth.local/kubecluster/imported:1", img); err != nil {
			t.Fatal(err)
		}
		ns := c.Namespace(t, "kubecluster")
		running, deleted, _ := runPod(ctx, t, c, ns, "berth.local/kubecluster/imported@"+digest.String(), "Never", false)
		t.Logf("create to Running: %s; delete to NotFound: %s", running, deleted)
	})

	t.Run("stop puts the host back as it was", func(t *testing.T) {
		base := c.dir.base
		// A pod left running: the stop ends its containers and their shim.
		runPod(ctx, t, c, c.Namespace(t, "kubecluster"), pauseImage, "Never", true)
		during := c.before.diff(snapshotHost(ctx, base))
		// The check sees what the cluster changed: its cgroups at least,
		// and the mounts of its containers.
		var cgroups, mounts bool
		for _, d := range during {
			cgroups = cgroups || strings.HasPrefix(d, "cgroup ")
			mounts = mounts || strings.HasPrefix(d, "mount ")
		}
		if !cgroups || !mounts {
			t.Errorf("while the cluster runs, the host differs only by %q: want its cgroups and mounts among the differences", during)
		}
		began := time.Now()
		for _, err := range c.Stop() {
			t.Error(err)
		}
		t.Logf("stop: %s", time.Since(began).Round(time.Millisecond))
		// The host as Stop read it, still under the machine-wide lock (after
		// it, another test binary's cluster may be starting).
		if d := c.before.diff(c.after); len(d) > 0 {
			t.Errorf("after stop the host differs: %q", d)
		}
		if _, err := os.Stat(base); !os.IsNotExist(err) {
			t.Errorf("the cluster's directory %s is still there (%v)", base, err)
		}
		if pids := pidsMentioning(base); len(pids) > 0 {
			t.Errorf("processes of the cluster survive its stop: %v", pids)
		}
		if c.lock != nil {
			t.Errorf("the machine-wide lock is still held after stop")
		}
	})
}

// runPod creates a pod of image in namespace ns, waits until it runs, reads
// its container's imageID, and unless leave, deletes it and waits for
// NotFound; it returns how long it took to run and to go.
func runPod(ctx context.Context, t *testing.T, c *Cluster, ns, image, pullPolicy string, leave bool) (running, deleted time.Duration, imageID string) {
	t.Helper()
	pods := "/api/v1/namespaces/" + ns + "/pods"
	began := time.Now()
	code, body, err := c.Do(ctx, "POST", pods, map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "sleeper"},
		"spec": map[string]any{
			"automountServiceAccountToken":  false,
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "sleeper", "image": image, "imagePullPolicy": pullPolicy,
			}},
		},
	})
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create the pod: %v %v", err, apiError("POST "+pods, code, body))
	}
	var pod struct {
		Status struct {
			Phase             string `json:"phase"`
			ContainerStatuses []struct {
				ImageID string          `json:"imageID"`
				State   json.RawMessage `json:"state"`
			} `json:"containerStatuses"`
		} `json:"status"`
	}
	err = c.waitFor(ctx, "the pod Running", func() (bool, error) {
		code, body, err := c.Do(ctx, "GET", pods+"/sleeper", nil)
		if err != nil || code != http.StatusOK {
			return false, err
		}
		if err := json.Unmarshal(body, &pod); err != nil {
			return false, err
		}
		if pod.Status.Phase == "Failed" {
			return false, apiError("the pod failed", code, body)
		}
		return pod.Status.Phase == "Running", nil
	})
	if err != nil {
		t.Fatalf("%v (its containers: %+v)", err, pod.Status.ContainerStatuses)
	}
	running = time.Since(began).Round(time.Millisecond)
	if leave {
		return running, 0, pod.Status.ContainerStatuses[0].ImageID
	}
	began = time.Now()
	// A graceful delete: the pod goes (NotFound) once the kubelet has
	// stopped its container.
	if code, body, err := c.Do(ctx, "DELETE", pods+"/sleeper", nil); err != nil || code != http.StatusOK {
		t.Fatalf("delete the pod: %v %v", err, apiError("DELETE", code, body))
	}
	if err := c.waitFor(ctx, "the pod NotFound", func() (bool, error) {
		code, _, err := c.Do(ctx, "GET", pods+"/sleeper", nil)
		return err == nil && code == http.StatusNotFound, nil
	}); err != nil {
		t.Fatal(err)
	}
	return running, time.Since(began).Round(time.Millisecond), pod.Status.ContainerStatuses[0].ImageID
}
