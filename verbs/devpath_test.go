package verbs_test

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

type kernelDevice struct{ verbs.DeviceDriver }

func (kernelDevice) DevName() string   { return "uverbs3" }
func (kernelDevice) DevPath() string   { return "/sys/class/infiniband_verbs/uverbs3" }
func (kernelDevice) IBDevPath() string { return "/sys/class/infiniband/mlx5_0" }

// A device's dev_name, dev_path and ibdev_path are its driver's, when it
// has a kernel device behind it, and empty otherwise.
func TestDevicePathsAreTheDriversOrEmpty(t *testing.T) {
	k := verbs.NewDevice("mlx5_0", 1, kernelDevice{})
	if k.DevName() != "uverbs3" || k.DevPath() != "/sys/class/infiniband_verbs/uverbs3" || k.IBDevPath() != "/sys/class/infiniband/mlx5_0" {
		t.Errorf("kernel device: %q %q %q", k.DevName(), k.DevPath(), k.IBDevPath())
	}
	s := verbs.NewDevice("soft", 2, struct{ verbs.DeviceDriver }{})
	if s.DevName() != "" || s.DevPath() != "" || s.IBDevPath() != "" {
		t.Errorf("device with no kernel side: %q %q %q", s.DevName(), s.DevPath(), s.IBDevPath())
	}
}
