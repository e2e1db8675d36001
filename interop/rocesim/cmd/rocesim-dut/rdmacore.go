//go:build rdmacore

package main

// With -tags rdmacore, rdma-core's devices are listed too, and a case
// configuration's dev_name can pick one (mlx5_0, rxe0).
import _ "github.com/rdmago/rdmago/rdmacore"
