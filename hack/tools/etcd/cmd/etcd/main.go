// Command etcd is etcd's own server entry point (etcdmain.Main), built by our go.mod
// because etcd's module cannot be installed with `go install` (it has replaces).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
