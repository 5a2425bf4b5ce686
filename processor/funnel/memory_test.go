package funnel

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func memRowFor(i int, campaign string) Row {
	return Row{PhoneNumberID: "107655290331184", MessageID: fmt.Sprintf("wamid.HBgLMTU1NTc4MTAwMDEVAgARGBI%016x", i),
		RecipientKey: fmt.Sprintf("%064x", i), First: 1_780_000_000 + uint32(i), WabaID: "104281907735512",
		Campaign: campaign, Template: "winter_sale", Stage: StageDelivered, ToDeliver: 3, ToRead: -1}
}

// validMemory is an empty memory of size messages, valid since second 1,
// as beginMemory leaves it on a database with no rows dated ahead.
func validMemory(size int) memory {
	m := newMemory(size)
	m.valid, m.h = true, 1
	m.young, m.old, m.future = map[memKey]memRow{}, map[memKey]memRow{}, map[memKey]uint32{}
	return m
}

// TestMemoryRecall: the memory gives back the row a message nets, with the
// strings of the state it is asked with; a message whose dimensions are
// not the remembered row's is redimensioned (to be looked up), one it
// never saw unknown, and so is any message once it forgot.
func TestMemoryRecall(t *testing.T) {
	m := validMemory(100)
	row := memRowFor(1, "campaign=winter-sale")
	m.put(m.key(row), m.dims(row), row, 2)

	want := row
	// A later status resolved: read, and a sent status stamped earlier
	// than the delivered one that came first.
	want.First, want.Stage, want.ToDeliver, want.ToRead = row.First-5, StageRead, 8, 9
	had, rc := m.recall(m.key(want), m.dims(want), want)
	if rc != remembered || had != row {
		t.Errorf("recall = %+v, %d; want the row put, remembered", had, rc)
	}
	other := want
	other.Campaign = "campaign=spring-sale"
	if _, rc := m.recall(m.key(other), m.dims(other), other); rc != redimensioned {
		t.Errorf("another campaign: %d, want redimensioned", rc)
	}
	other = want
	// The same bytes in the same order, split elsewhere between the three.
	other.WabaID, other.Campaign = want.WabaID+want.Campaign[:1], want.Campaign[1:]
	if _, rc := m.recall(m.key(other), m.dims(other), other); rc != redimensioned {
		t.Errorf("the same bytes split otherwise: %d, want redimensioned", rc)
	}
	stranger := memRowFor(2, "campaign=winter-sale")
	if _, rc := m.recall(m.key(stranger), m.dims(stranger), stranger); rc != unknown {
		t.Errorf("a message never put: %d, want unknown", rc)
	}
	if !m.isNew(m.key(stranger), stranger.First) {
		t.Errorf("a message first sent after h, not in future: want new")
	}
	m.future[m.key(stranger)] = stranger.First
	if m.isNew(m.key(stranger), stranger.First) {
		t.Errorf("a message with rows dated ahead (in future): want not new")
	}
	k := m.key(row)
	m.forget()
	if _, rc := m.recall(m.key(want), m.dims(want), want); rc != unknown || m.isNew(m.key(stranger), stranger.First) {
		t.Errorf("after forget: %d, new %v; want unknown and not new", rc, m.isNew(m.key(stranger), stranger.First))
	}
	// The seeds survive forget: a key hashes alike before and after.
	if m.key(row) != k {
		t.Errorf("a key's hash changed with forget")
	}
}

// TestMemoryFootprint: a full memory of messages with Meta's longest
// callback data (512 bytes) holds well under 200 bytes a message (73
// measured), none of its strings; until the memory hashed them it held
// ~870 bytes a message.
func TestMemoryFootprint(t *testing.T) {
	const n = 100_000
	campaign := "campaign=winter-sale;batch=" + strings.Repeat("x", 512-27)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := validMemory(n)
	for i := range n {
		// A new campaign string each: what the pass read and drops.
		row := memRowFor(i, campaign[:len(campaign)-1]+string(rune('a'+i%26)))
		m.put(m.key(row), m.dims(row), row, 2)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	held := len(m.young) + len(m.old)
	runtime.KeepAlive(m)
	t.Logf("%d messages held, %.0f bytes of heap a message", held, per)
	if held < n/2 {
		t.Fatalf("the memory held %d messages, want at least %d", held, n/2)
	}
	if per > 200 {
		t.Errorf("%.0f bytes of heap a message, want at most 200 (the strings are not kept)", per)
	}
}
