//go:build rdmacore && !(linux && cgo)

package rdmacore

// The rdmacore build tag needs cgo on Linux (libibverbs and librdmacm):
// build with CGO_ENABLED=1 on Linux, or without the tag.
var _ = rdmacore_build_tag_needs_cgo_on_linux
