package gpu

import (
	"encoding/json"
	"fmt"
)

// EncodeDevices renders devices as the value of the gpusched.io/gpu-devices
// annotation: the JSON list that InventoryFromNode reads back into the same
// devices, field for field. It applies NewInventory's checks first (at most
// MaxDevicesPerNode devices, indices non-negative and distinct, memory not
// negative), so a value it returns is one the engine accepts.
func EncodeDevices(devices []Device) (string, error) {
	if _, err := NewInventory(devices); err != nil {
		return "", fmt.Errorf("encoding %s: %w", AnnotationDevices, err)
	}
	if devices == nil {
		devices = []Device{} // "[]", not "null": a node with no GPUs lists none
	}
	raw, err := json.Marshal(devices)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", AnnotationDevices, err)
	}
	return string(raw), nil
}
