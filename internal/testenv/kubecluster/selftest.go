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

// SelfTest checks the cluster itself, from a test of a package whose
// tests share it (there is no second cluster to start: one runs per
// machine, and the package's cluster is the one a run of the whole suite
// already pays for):
//
//   - a pod pulls its image by digest from the loopback registry, and its
//     container status's imageID ends in that digest;
//   - an image put into the cluster's containerd (ImportImage) runs by
//     digest with imagePullPolicy Never;
//   - with a pod running, the host check sees the cluster's cgroups and
//     mounts (so that an empty difference after Stop means something).
//
// The last pod is left running, in a namespace that is not deleted: Main's
// Stop must end it, put the host back and remove the cluster's files, and
// the test binary exits 1 with each thing it could not do.
func SelfTest(t *testing.T, c *Cluster) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	prog, err := os.ReadFile(c.dir.path("pause"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a pod pulls its image by digest from the loopback registry", func(t *testing.T) {
		reg := testenv.StartRegistry(t, nil)
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
		running, deleted, imageID := c.runPod(ctx, t, ns, reg.Host+"/kubecluster/sleeper@"+digest.String(), "IfNotPresent", false)
		if !strings.HasSuffix(imageID, "@"+digest.String()) {
			t.Errorf("the container's imageID is %q, want it to end in @%s", imageID, digest)
		}
		if reg.ManifestGets() == 0 {
			t.Errorf("the registry served no manifest: the image did not come from it")
		}
		t.Logf("create to Running (pull included): %s; delete to NotFound: %s", running, deleted)
	})

	t.Run("an imported image runs by digest", func(t *testing.T) {
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
		running, deleted, _ := c.runPod(ctx, t, ns, "berth.local/kubecluster/imported@"+digest.String(), "Never", false)
		t.Logf("create to Running: %s; delete to NotFound: %s", running, deleted)
	})

	t.Run("the host check sees a running pod", func(t *testing.T) {
		ns := c.namespace(t, "kubecluster-left", false)
		c.runPod(ctx, t, ns, pauseImage, "Never", true)
		var cgroups, mounts bool
		during := c.before.diff(snapshotHost(ctx, c.dir.base))
		for _, d := range during {
			cgroups = cgroups || strings.HasPrefix(d, "cgroup ")
			mounts = mounts || strings.HasPrefix(d, "mount ")
		}
		if !cgroups || !mounts {
			t.Errorf("while the cluster runs a pod, the host differs only by %q: want its cgroups and mounts among the differences", during)
		}
	})
}

// runPod creates a pod of image in namespace ns, waits until it runs, reads
// its container's imageID, and unless leave, deletes it and waits for
// NotFound; it returns how long it took to run and to go.
func (c *Cluster) runPod(ctx context.Context, t *testing.T, ns, image, pullPolicy string, leave bool) (running, deleted time.Duration, imageID string) {
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
