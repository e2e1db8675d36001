package tool

import (
	"errors"
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// ErrNoDevice is Device's error when verbs lists no device.
var ErrNoDevice = errors.New("no IB devices found")

// Device is the device a tool's -d (--ib-dev) option picks, as the C
// tools pick it from ibv_get_device_list: the device of that name, or the
// first one listed when name is empty. Its errors read as theirs.
func Device(name string) (*verbs.Device, error) {
	if name != "" {
		d, err := verbs.DeviceByName(name)
		if err != nil {
			return nil, fmt.Errorf("IB device %s not found", name)
		}
		return d, nil
	}
	devs, err := verbs.Devices()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	case len(devs) == 0:
		return nil, ErrNoDevice
	}
	return devs[0], nil
}
