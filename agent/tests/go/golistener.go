// A Go daemon's listener, as in the Multus incident: net.Listen("unix", path) with the
// standard library's defaults, so closing the listener unlinks the path — whatever file is
// there by then. Prints "listening", closes on SIGTERM or SIGINT, prints "closed", exits.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: golistener PATH")
		os.Exit(2)
	}
	l, err := net.Listen("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("closed")
}
