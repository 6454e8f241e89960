// A Go daemon's listener, as in the Multus incident: net.Listen("unix", path) with the
// standard library's defaults, so closing the listener unlinks the path — whatever file is
// there by then. Prints "listening", closes on SIGTERM or SIGINT, prints "closed", exits.
//
// -keep: the seed's fix, SetUnlinkOnClose(false): closing leaves the path alone.
// -rmdir: a successor's start-up: os.RemoveAll of the socket's directory (its predecessor's
// live socket included), then MkdirAll, then listen.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	keep := flag.Bool("keep", false, "do not unlink the path on close")
	rmdir := flag.Bool("rmdir", false, "remove and re-create the socket's directory first")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: golistener [-keep] [-rmdir] PATH")
		os.Exit(2)
	}
	path := flag.Arg(0)
	if *rmdir {
		dir := filepath.Dir(path)
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *keep {
		l.(*net.UnixListener).SetUnlinkOnClose(false)
	}
	// Registered before "listening": a SIGTERM sent as soon as that line is read must reach
	// the handler, not the default action (death without Close).
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("listening")
	<-stop
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("closed")
}
