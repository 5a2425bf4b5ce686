package api_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// t0 is the start of the generated traffic.
var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// number is a business number of the data set.
type number struct{ id, display, waba string }

var numbers = []number{
	{"106540352240001", "15550000001", "waba-1"},
	{"106540352240002", "15550000002", "waba-1"},
	{"106540352240003", "15550000003", "waba-2"}, // coexistence: has echoes
}

// status is one status webhook of a message.
type status struct {
	name string
	at   time.Time
	code int32 // failed only
}

// message is an outbound message and what happened to it: the truth the
// answers are checked against.
type message struct {
	id        string
	num       number
	recipient string
	campaign  string
	statuses  []status
}

// inbound is an inbound message.
type inbound struct {
	id   string
	num  number
	from string
	at   time.Time
}

// dataset is generated traffic, its bodies, and the truth.
type dataset struct {
	messages []message
	inbound  []inbound
	echoes   map[string][]time.Time // by number id
	// Number events.
	upgradeAt, flaggedAt time.Time
	valueErrorAt         time.Time
	bodies               [][]byte // every webhook body, in arrival order
	retry                []byte   // statuses already posted, in another body (Meta's retry after the window)
	badBodies            [][]byte // signed but not JSON
}

var failureCodes = []int32{131026, 130429, 131048, 131056, 131049}

// generate makes n outbound messages over a few minutes from t0 across the
// numbers, with a mix of outcomes, plus inbound messages, echoes and number
// events; bodies carry several statuses each, out of order.
func generate(n int) *dataset {
	rng := rand.New(rand.NewSource(7))
	d := &dataset{echoes: map[string][]time.Time{}}
	for i := 0; i < n; i++ {
		m := message{
			id:        fmt.Sprintf("wamid.OUT%05d", i),
			num:       numbers[i%len(numbers)],
			recipient: fmt.Sprintf("1555900%04d", i%50),
			campaign:  fmt.Sprintf("camp-%d", i%4),
		}
		if i%4 == 2 {
			// JSON, as biz_opaque_callback_data often is: commas and
			// quotes of its own.
			m.campaign = `{"campaign":"camp-2","wave":2}`
		}
		sent := t0.Add(time.Duration(i) * time.Second)
		m.statuses = append(m.statuses, status{name: "sent", at: sent})
		switch i % 10 {
		case 0:
			m.statuses = append(m.statuses, status{name: "failed", at: sent.Add(2 * time.Second), code: failureCodes[(i/10)%len(failureCodes)]})
		case 1: // sent only
		case 2: // read, its delivered status lost
			m.statuses = append(m.statuses, status{name: "read", at: sent.Add(time.Duration(20+i%9) * time.Second)})
		default:
			m.statuses = append(m.statuses, status{name: "delivered", at: sent.Add(time.Duration(1+i%3) * time.Second)})
			if i%2 == 0 {
				m.statuses = append(m.statuses, status{name: "read", at: sent.Add(time.Duration(10+i%7) * time.Second)})
			}
		}
		d.messages = append(d.messages, m)
	}
	for k := 0; k < 40; k++ {
		num := numbers[k%2]
		d.inbound = append(d.inbound, inbound{id: fmt.Sprintf("wamid.IN%04d", k), num: num, from: fmt.Sprintf("1555900%04d", k%50), at: t0.Add(time.Duration(k*7) * time.Second)})
	}
	for k := 0; k < 5; k++ {
		d.echoes[numbers[2].id] = append(d.echoes[numbers[2].id], t0.Add(time.Duration(30+k*11)*time.Second))
	}
	d.upgradeAt = t0.Add(120 * time.Second)
	d.flaggedAt = t0.Add(60 * time.Second)
	d.valueErrorAt = t0.Add(90 * time.Second)

	// One status per item, grouped by number into bodies of up to 7, each
	// body's statuses shuffled and the bodies shuffled: arrival order is not
	// time order.
	type item struct {
		num  number
		json string
	}
	var items []item
	for _, m := range d.messages {
		for _, s := range m.statuses {
			items = append(items, item{m.num, statusJSON(m, s)})
		}
	}
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	byNum := map[string][]string{}
	for _, it := range items {
		byNum[it.num.id] = append(byNum[it.num.id], it.json)
	}
	for _, num := range numbers {
		list := byNum[num.id]
		for len(list) > 0 {
			k := min(len(list), 1+rng.Intn(7))
			d.bodies = append(d.bodies, messagesBody(num, `"statuses":[`+strings.Join(list[:k], ",")+`]`))
			list = list[k:]
		}
	}
	for _, in := range d.inbound {
		d.bodies = append(d.bodies, messagesBody(in.num, fmt.Sprintf(
			`"contacts":[{"profile":{"name":"Someone"},"wa_id":%q}],"messages":[{"from":%q,"id":%q,"timestamp":"%d","type":"text","text":{"body":"hello there"}}]`,
			in.from, in.from, in.id, in.at.Unix())))
	}
	for id, ts := range d.echoes {
		num := numberByID(id)
		var echoes []string
		for k, at := range ts {
			echoes = append(echoes, fmt.Sprintf(`{"from":%q,"to":"15559000001","id":"wamid.ECHO%d","timestamp":"%d","type":"text","text":{"body":"sent from the app"}}`, num.display, k, at.Unix()))
		}
		d.bodies = append(d.bodies, changeBody(num.waba, d.echoes[id][0], "smb_message_echoes", fmt.Sprintf(
			`{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},"message_echoes":[%s]}`,
			num.display, num.id, strings.Join(echoes, ","))))
	}
	d.bodies = append(d.bodies,
		changeBody(numbers[0].waba, d.upgradeAt, "phone_number_quality_update", fmt.Sprintf(
			`{"display_phone_number":%q,"event":"THROUGHPUT_UPGRADE","current_limit":"TIER_UNLIMITED","max_daily_conversations_per_business":"TIER_UNLIMITED"}`, numbers[0].display)),
		changeBody(numbers[1].waba, d.flaggedAt, "phone_number_quality_update", fmt.Sprintf(
			`{"display_phone_number":%q,"event":"FLAGGED","old_limit":"TIER_2K","current_limit":"TIER_250"}`, numbers[1].display)),
		changeBody(numbers[1].waba, d.valueErrorAt, "messages", fmt.Sprintf(
			`{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},"errors":[{"code":130429,"title":"Rate limit hit","message":"(#130429) Rate limit hit","error_data":{"details":"Cloud API message throughput has been reached."}}]}`,
			numbers[1].display, numbers[1].id)),
	)
	// Meta sends some statuses again, inside a new body.
	var again []string
	for _, m := range d.messages[:min(30, len(d.messages))] {
		if m.num == numbers[0] {
			again = append(again, statusJSON(m, m.statuses[len(m.statuses)-1]))
		}
	}
	d.retry = messagesBody(numbers[0], `"statuses":[`+strings.Join(again, ",")+`]`)
	d.badBodies = [][]byte{[]byte("this is not json"), []byte(`{"object":"whatsapp_business_account","entry":[`)}
	return d
}

func numberByID(id string) number {
	for _, n := range numbers {
		if n.id == id {
			return n
		}
	}
	panic(id)
}

func statusJSON(m message, s status) string {
	var errs string
	if s.name == "failed" {
		errs = fmt.Sprintf(`,"errors":[{"code":%d,"title":"Failure","message":"Failure","error_data":{"details":"generated"}}]`, s.code)
	}
	return fmt.Sprintf(`{"id":%q,"status":%q,"timestamp":"%d","recipient_id":%q,"biz_opaque_callback_data":%q%s}`,
		m.id, s.name, s.at.Unix(), m.recipient, m.campaign, errs)
}

func messagesBody(num number, value string) []byte {
	return changeBody(num.waba, t0, "messages", fmt.Sprintf(
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":%q,"phone_number_id":%q},%s}`, num.display, num.id, value))
}

func changeBody(waba string, at time.Time, field, value string) []byte {
	return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":%q,"time":%d,"changes":[{"field":%q,"value":%s}]}]}`,
		waba, at.Unix(), field, value))
}

// resolve maps the display numbers of the data set.
func resolve(display string) string {
	for _, n := range numbers {
		if n.display == display {
			return n.id
		}
	}
	return ""
}

// load writes the data set into a fresh, migrated database as stage 1
// would: every body twice (a redelivery), Meta's retry of some statuses in
// another body, and the whole data set a third time (a replay of RAW).
func load(t *testing.T, d *dataset) *schematest.ClickHouseDB {
	t.Helper()
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	norm := processor.NewNormalizer(schema.NewHasher([]byte("test-key")))
	w := chwriter.New(ch.Conn, ch.Database)
	seq := uint64(0)
	write := func(bodies [][]byte, at time.Time) {
		var rows schema.Rows
		for _, b := range bodies {
			seq++
			norm.Normalize(b, schema.Source{App: "default", ReceivedAt: at, RawSeq: seq}, schema.RawMsgID(b), &rows)
		}
		for i := range rows.Management { // as stage 1 resolves them
			if r := &rows.Management[i]; r.PhoneNumberID == "" {
				r.PhoneNumberID = resolve(r.DisplayPhoneNumber)
			}
		}
		if err := w.Write(ctx, &rows); err != nil {
			t.Fatal(err)
		}
	}
	all := append(append([][]byte{}, d.bodies...), d.badBodies...)
	write(all, t0.Add(10*time.Minute))
	write(all, t0.Add(10*time.Minute))
	write([][]byte{d.retry}, t0.Add(20*time.Minute))
	write(all, t0.Add(time.Hour))
	return ch
}

// Truths computed from the generated messages, independently of ClickHouse.

func (d *dataset) failuresByCode() map[int32]uint64 {
	out := map[int32]uint64{130429: 1} // the value-level error
	for _, m := range d.messages {
		for _, s := range m.statuses {
			if s.name == "failed" {
				out[s.code]++
			}
		}
	}
	return out
}

type funnelTruth struct {
	messages, sent, delivered, read, failed uint64
	toDeliver, toRead                       []float64
}

func (d *dataset) funnelBy(key func(m message) string) map[string]*funnelTruth {
	return d.funnelWhere(key, func(message) bool { return true })
}

// firstStatus is when a message's first status was.
func (m message) firstStatus() time.Time {
	at := m.statuses[0].at
	for _, s := range m.statuses {
		if s.at.Before(at) {
			at = s.at
		}
	}
	return at
}

// funnelWhere is funnelBy over the messages keep keeps.
func (d *dataset) funnelWhere(key func(m message) string, keep func(m message) bool) map[string]*funnelTruth {
	out := map[string]*funnelTruth{}
	for _, m := range d.messages {
		if !keep(m) {
			continue
		}
		f := out[key(m)]
		if f == nil {
			f = &funnelTruth{}
			out[key(m)] = f
		}
		f.messages++
		at := map[string]time.Time{}
		for _, s := range m.statuses {
			at[s.name] = s.at
		}
		if _, ok := at["failed"]; ok {
			f.failed++
			continue
		}
		f.sent++
		sent := at["sent"]
		if r, ok := at["read"]; ok {
			f.read++
			f.toRead = append(f.toRead, r.Sub(sent).Seconds())
		}
		del, ok := at["delivered"]
		if !ok {
			del, ok = at["read"]
		}
		if ok {
			f.delivered++
			f.toDeliver = append(f.toDeliver, del.Sub(sent).Seconds())
		}
	}
	return out
}

// nearestRank is the level-quantile by nearest rank: the ceil(level * n)-th
// smallest value (the first when that is 0).
func nearestRank(v []float64, level float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[max(int(math.Ceil(level*float64(len(s))))-1, 0)]
}

// perMinute is a number's outbound (by first status) and inbound messages
// by minute.
func (d *dataset) perMinute(id string) (out, in map[time.Time]uint64) {
	out, in = map[time.Time]uint64{}, map[time.Time]uint64{}
	for _, m := range d.messages {
		if m.num.id == id {
			out[m.statuses[0].at.Truncate(time.Minute)]++
		}
	}
	for _, at := range d.echoes[id] {
		out[at.Truncate(time.Minute)]++
	}
	for _, x := range d.inbound {
		if x.num.id == id {
			in[x.at.Truncate(time.Minute)]++
		}
	}
	return out, in
}
