package funnel

import (
	"fmt"
	"testing"
)

// TestFold: a pass's rows become one row per message and one per hourly
// sum, each sum the total of its messages' shares; shares that net nothing
// (a message replaced by a row with the same counts) leave no sum row.
func TestFold(t *testing.T) {
	const hour = 1_780_000_000 / SumSeconds * SumSeconds
	var rows []netRow
	for i := range 100 {
		r := Row{PhoneNumberID: "p1", MessageID: fmt.Sprint("m", i), RecipientKey: "r", First: hour + uint32(i),
			WabaID: "w", Campaign: "c", Stage: StageDelivered, ToDeliver: int32(i % 2), ToRead: -1}
		rows = append(rows, netRow{r, 1})
	}
	// m0 was delivered in 0 s before and is now read in 5: its old row out,
	// its new one in.
	old := rows[0].Row
	read := old
	read.Stage, read.ToRead = StageRead, 5
	rows = append(rows, netRow{old, -1}, netRow{read, 1})
	// Another number's message that was sent and is still sent with a new
	// campaign name: its counts move from one campaign to the other.
	sent := Row{PhoneNumberID: "p2", MessageID: "x", RecipientKey: "r", First: hour + SumSeconds, WabaID: "w",
		Campaign: "a", Stage: StageSent, ToDeliver: -1, ToRead: -1}
	renamed := sent
	renamed.Campaign = "b"
	rows = append(rows, netRow{sent, -1}, netRow{renamed, 1})
	// And one whose row is replaced by itself nets no sums at all.
	same := Row{PhoneNumberID: "p3", MessageID: "y", RecipientKey: "r", First: hour, Stage: StageSent, ToDeliver: -1, ToRead: -1}
	rows = append(rows, netRow{same, -1}, netRow{same, 1})

	c := fold(rows)
	type sum struct {
		kind                     uint8
		phone, campaign          string
		hour                     int64
		toDeliver, toRead        int32
		n, sent, delivered, read int32
	}
	var messages int
	var sums []sum
	for i := range c.kind {
		if c.kind[i] == KindMessage {
			messages++
			continue
		}
		if c.message[i] != "" || c.recipient[i] != "" || c.stage[i] != 0 {
			t.Errorf("sum row %d has a message's columns: %q %q %d", i, c.message[i], c.recipient[i], c.stage[i])
		}
		sums = append(sums, sum{c.kind[i], c.phone[i], c.campaign[i], c.first[i].Unix(), c.toDeliver[i], c.toRead[i],
			c.counts[0][i], c.counts[1][i], c.counts[2][i], c.counts[3][i]})
	}
	if messages != len(rows) {
		t.Errorf("%d message rows, want %d (one per row)", messages, len(rows))
	}
	want := []sum{
		// 100 messages of p1, m0 now read: n 100, sent 100, delivered 100, read 1.
		{KindCounts, "p1", "c", hour, 0, 0, 100, 100, 100, 1},
		// to_deliver 0 for the even messages (m0 still), 1 for the odd.
		{KindToDeliver, "p1", "c", hour, 0, 0, 50, 0, 0, 0},
		{KindToDeliver, "p1", "c", hour, 1, 0, 50, 0, 0, 0},
		{KindToRead, "p1", "c", hour, 0, 5, 1, 0, 0, 0},
		// p2's sent message moved from campaign a to b.
		{KindCounts, "p2", "a", hour + SumSeconds, 0, 0, -1, -1, 0, 0},
		{KindCounts, "p2", "b", hour + SumSeconds, 0, 0, 1, 1, 0, 0},
	}
	if fmt.Sprint(sums) != fmt.Sprint(want) {
		t.Errorf("sum rows:\n got %v\nwant %v", sums, want)
	}
	for i, col := range [][]int32{c.toDeliver, c.toRead} {
		if len(col) != len(c.kind) {
			t.Errorf("column %d has %d values for %d rows", i, len(col), len(c.kind))
		}
	}
	for i := range c.counts {
		if len(c.counts[i]) != len(c.kind) {
			t.Errorf("count column %d has %d values for %d rows", i, len(c.counts[i]), len(c.kind))
		}
	}
}
