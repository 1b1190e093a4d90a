// Command selfsigned writes a self-signed serving certificate (tls.crt,
// tls.key) for 127.0.0.1 into the directory its one argument names:
// hack/install-kueue.sh's placeholder for Kueue's metrics certificate.
package main

import (
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/selfsigned"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: selfsigned DIR")
		os.Exit(2)
	}
	if _, err := selfsigned.Write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "selfsigned:", err)
		os.Exit(1)
	}
}
