//go:build ignore

// fusefloor mounts go-fuse's loopback file system (fs.NewLoopbackRoot:
// every request passed to the directory underneath, nothing of its own)
// at MOUNTPOINT over DIR, with the kernel settings avfs's mount uses
// (names, attributes and misses cached for a minute,
// default_permissions), and serves it until SIGTERM or SIGINT. Over a
// tmpfs DIR a workload run in it costs what FUSE through go-fuse costs
// by itself: scripts/fusefloor.sh compares avfs's mount against it. It
// prints "ready" on stdout once mounted.
//
//	go run ./scripts/fusefloor.go MOUNTPOINT DIR
package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: fusefloor MOUNTPOINT DIR")
	}
	root, err := fs.NewLoopbackRoot(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	ttl := time.Minute
	srv, err := fs.Mount(os.Args[1], root, &fs.Options{
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
		MountOptions: fuse.MountOptions{
			Options:           []string{"default_permissions"},
			DirectMountStrict: true,
			FsName:            os.Args[2],
			Name:              "fusefloor",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		if err := srv.Unmount(); err != nil {
			log.Print(err)
		}
	}()
	fmt.Println("ready")
	srv.Wait()
}
