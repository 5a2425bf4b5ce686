//go:build !(linux || darwin || freebsd) || wahook_heap_dedupe

package ingest

// allocSlots returns at least n zeroed slots on the Go heap, where the
// platform has no anonymous mmap in package syscall (or with the build tag
// wahook_heap_dedupe, to compare). The collector does not scan them (no
// pointers), but counts them towards its heap goal: see dedupe_mmap.go.
func allocSlots(n int) []dupKey { return make([]dupKey, (n+255)/256*256) }

// freeSlots leaves the slots to the garbage collector.
func freeSlots([]dupKey) {}
