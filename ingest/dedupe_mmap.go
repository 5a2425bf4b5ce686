//go:build (linux || darwin || freebsd) && !wahook_heap_dedupe

package ingest

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// allocSlots returns at least n zeroed slots in anonymous memory mapped
// outside the Go heap, as VictoriaMetrics' fastcache keeps its buckets: the
// garbage collector never scans them (a pointer-free slice on the heap would
// not be scanned either) and, more to the point, does not count them
// towards its heap goal. On the heap, a table of 100 MiB would let the
// request path's garbage grow by as much again before each collection. The
// kernel provides the pages zeroed, and only once they are first written.
func allocSlots(n int) []dupKey {
	size := roundUp(n*int(unsafe.Sizeof(dupKey{})), os.Getpagesize())
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		// Out of memory or address space, as when the Go runtime cannot
		// grow its heap: nothing sensible to go on with.
		panic(fmt.Sprintf("map %d bytes for the duplicate index: %v", size, err))
	}
	return unsafe.Slice((*dupKey)(unsafe.Pointer(unsafe.SliceData(mem))), size/int(unsafe.Sizeof(dupKey{})))
}

// freeSlots unmaps slots from allocSlots; nothing may use them after it.
func freeSlots(s []dupKey) {
	mem := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(dupKey{})))
	if err := syscall.Munmap(mem); err != nil {
		panic(fmt.Sprintf("BUG: unmap the duplicate index: %v", err))
	}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
