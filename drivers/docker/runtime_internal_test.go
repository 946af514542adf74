package docker

import (
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/drivers"
)

// A container whose engine-reported runtime is not the configured one is
// refused (Acquire then removes it); without a configured runtime any
// runtime passes.
func TestCheckContainerRuntime(t *testing.T) {
	ins := func(rt string) container.InspectResponse {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", HostConfig: &container.HostConfig{Runtime: rt}}}
	}
	gv := &settings{host: "unix:///x.sock", runtime: runtimeGVisor}
	if err := checkContainerRuntime(gv, ins("runsc")); err != nil {
		t.Errorf("runsc under runsc: %v", err)
	}
	for _, got := range []string{"runc", ""} {
		if err := checkContainerRuntime(gv, ins(got)); !errors.Is(err, errRuntime) || !errors.Is(err, drivers.ErrUnsupported) {
			t.Errorf("runtime %q under a runsc config: err = %v, want one naming the mismatch", got, err)
		}
	}
	if err := checkContainerRuntime(gv, container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1"}}); err == nil {
		t.Errorf("an inspect without a host config passed")
	}
	if err := checkContainerRuntime(&settings{}, ins("runc")); err != nil {
		t.Errorf("no configured runtime: %v", err)
	}
}
