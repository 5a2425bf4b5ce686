package schema

import "testing"

func TestEventsSubject(t *testing.T) {
	tests := []struct {
		number string
		want   string
	}{
		{"107655290331184", "wahook.events.107655290331184.status"},
		{"", "wahook.events._.status"},
		{"1.2 3>*", "wahook.events.1_2_3__.status"},
		{"ab\u00e9", "wahook.events.ab__.status"},
	}
	for _, tt := range tests {
		if got := EventsSubject(tt.number, KindStatus); got != tt.want {
			t.Errorf("EventsSubject(%q) = %q, want %q", tt.number, got, tt.want)
		}
	}
}

func TestEventIDStable(t *testing.T) {
	a := EventID(KindStatus, "1", "wamid.x", "sent")
	if a != EventID(KindStatus, "1", "wamid.x", "sent") || len(a) != 32 {
		t.Fatalf("EventID not stable or not 16 bytes of hex: %q", a)
	}
	// Parts are separated, so moving a boundary changes the id.
	if a == EventID(KindStatus, "1w", "amid.x", "sent") || a == EventID(KindInbound, "1", "wamid.x", "sent") {
		t.Fatal("EventID collides across part boundaries or kinds")
	}
}
