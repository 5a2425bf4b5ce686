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

// TestEventIDSeparatorInPart checks that a part holding the separator 0x1f
// (a body can spell it \u001f) cannot move a part boundary, and that the
// ids of parts without it are the ones stored so far.
func TestEventIDSeparatorInPart(t *testing.T) {
	if EventID(KindStatus, "wamid.A\x1f", "sent") == EventID(KindStatus, "wamid.A", "\x1fsent") {
		t.Error(`("wamid.A\x1f", "sent") and ("wamid.A", "\x1fsent") have the same id`)
	}
	// The escape byte itself must not let an escaped part pass for another.
	if EventID(KindStatus, "a\x1f", "b") == EventID(KindStatus, "a\x1e\x01", "b") {
		t.Error("an escaped 0x1f collides with the escape sequence given as bytes")
	}
	if EventID(KindStatus, "a\x1e\x01\x1f") == EventID(KindStatus, "a\x1f\x1e\x01") {
		t.Error("0x1e and 0x1f collide after escaping")
	}
	// Ids computed before the escape was added (they are stored): parts
	// without 0x1f, with and without 0x1e, keep them.
	pinned := []struct {
		id    string
		parts []string
	}{
		{"d59ff530b1e9ad8aea02ab0312361a43", []string{"1555", "wamid.A", "", "sent", "1781514312", ""}},
		{"6c74a526fe17000d21425d9826c7e695", []string{"a\x1eb"}},
	}
	for _, p := range pinned {
		if got := EventID(KindStatus, p.parts...); got != p.id {
			t.Errorf("EventID(status, %q) = %s, want %s as before", p.parts, got, p.id)
		}
	}
}

// TestRecipient: a phone number written by a sending service in any of the
// usual ways is the digits Meta's webhooks carry; a BSUID, a number already
// in digits and anything else are left as they are.
func TestRecipient(t *testing.T) {
	for in, want := range map[string]string{
		"15551234567": "15551234567", "+15551234567": "15551234567", "+1 (555) 123-4567": "15551234567",
		"+44 7700.900.456": "447700900456", "1-555-123-4567": "15551234567",
		"US.20571938846102937745": "US.20571938846102937745", "US.ENT.588": "US.ENT.588",
		"": "", "+": "+", "555+1234": "555+1234", "abc 123": "abc 123",
	} {
		if got := Recipient(in); got != want {
			t.Errorf("Recipient(%q) = %q, want %q", in, got, want)
		}
	}
}
