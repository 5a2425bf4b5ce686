package meta

import (
	"encoding/json"
	"fmt"
	"testing"
)

// typedView returns the typed view of a change as a fresh pointer of the
// same type, decoded by encoding/json from the change's raw value, and the
// view itself. encoding/json stands in for a second, independent decoder:
// the two must agree on every known key (Raw and Extra are not compared;
// they are `json:"-"`). With a nil t it returns only the view.
func typedView(t *testing.T, c *Change) (mine, std any) {
	views := []struct {
		ok    bool
		mine  any
		fresh any
	}{
		{c.Messaging != nil, c.Messaging, new(MessagingValue)},
		{c.QualityUpdate != nil, c.QualityUpdate, new(PhoneNumberQualityUpdate)},
		{c.CapabilityUpdate != nil, c.CapabilityUpdate, new(BusinessCapabilityUpdate)},
		{c.AccountUpdate != nil, c.AccountUpdate, new(AccountUpdate)},
		{c.AccountAlert != nil, c.AccountAlert, new(AccountAlert)},
		{c.AccountReview != nil, c.AccountReview, new(AccountReviewUpdate)},
		{c.TemplateStatus != nil, c.TemplateStatus, new(TemplateStatusUpdate)},
		{c.TemplateQuality != nil, c.TemplateQuality, new(TemplateQualityUpdate)},
		{c.TemplateCategory != nil, c.TemplateCategory, new(TemplateCategoryUpdate)},
		{c.TemplateComponents != nil, c.TemplateComponents, new(TemplateComponentsUpdate)},
		{c.NameUpdate != nil, c.NameUpdate, new(PhoneNumberNameUpdate)},
		{c.Security != nil, c.Security, new(SecurityUpdate)},
		{c.PartnerSolution != nil, c.PartnerSolution, new(PartnerSolutionsUpdate)},
		{c.PaymentConfiguration != nil, c.PaymentConfiguration, new(PaymentConfigurationUpdate)},
	}
	for _, v := range views {
		if !v.ok {
			continue
		}
		if t == nil {
			return v.mine, nil
		}
		if err := json.Unmarshal(c.Value, v.fresh); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		return v.mine, v.fresh
	}
	return nil, nil
}

// notForEncodingJSON lists the testdata bodies that encoding/json cannot
// decode into the same structs, and why.
var notForEncodingJSON = map[string]string{
	// A numeric recipient_id (kept as its digits here) is an error for a
	// string field in encoding/json, and parent_recipient_user_id is a second
	// spelling that a struct tag cannot express.
	"status_variants.json": "flexible strings and an alias key",
}

// duplicateKeyBodies repeat keys where the decoder means to agree with
// encoding/json: the last copy of a key wins, for strings, numbers, lists of
// items, a change's value and field, and the entry list. (Where it differs
// on purpose, an object given twice, see TestDuplicateKeysUnlikeEncodingJSON.)
var duplicateKeyBodies = map[string]string{
	"status keys": string(envelope(statusesChange(
		`{"id":"wamid.B","id":"wamid.A","status":"sent","status":"delivered","timestamp":"1","timestamp":2,"recipient_id":"1","recipient_id":"2"}`))),
	"statuses": string(envelope(`{"value":{"statuses":[{"id":"wamid.B","status":"read"}],"messaging_product":"x","statuses":[{"id":"wamid.A","status":"sent"}],"messaging_product":"whatsapp"},"field":"messages"}`)),
	"status errors": string(envelope(statusesChange(
		`{"id":"wamid.A","status":"failed","errors":[{"code":1,"title":"a"}],"errors":[{"code":131026,"title":"b"}]}`))),
	"value before field": string(envelope(`{"value":{"statuses":[{"id":"wamid.B"}]},"value":{"statuses":[{"id":"wamid.A"}]},"field":"messages"}`)),
	"value after field":  string(envelope(`{"field":"messages","value":{"statuses":[{"id":"wamid.B"}]},"value":{"statuses":[{"id":"wamid.A"}]}}`)),
	"field after value":  string(envelope(`{"field":"calls","value":{"statuses":[{"id":"wamid.A","status":"sent"}]},"field":"messages"}`)),
	"field again":        string(envelope(`{"field":"messages","value":{"statuses":[{"id":"wamid.A"}]},"field":"zzz"}`)),
	"entry and changes":  `{"entry":[{"id":"1"}],"entry":[{"id":"2","changes":[{"value":{},"field":"x"}],"id":"3","changes":[{"value":{"statuses":[{"id":"wamid.A"}]},"field":"messages"}]}]}`,
}

func TestAgreesWithEncodingJSON(t *testing.T) {
	bodies := loadFixtures(t)
	for name, body := range loadTestdata(t) {
		if _, skip := notForEncodingJSON[name]; !skip {
			bodies["testdata/"+name] = body
		}
	}
	for name, body := range duplicateKeyBodies {
		bodies["duplicate keys: "+name] = []byte(body)
	}
	for name, body := range bodies {
		p, err := Decode(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var std Payload
		if err := json.Unmarshal(body, &std); err != nil {
			t.Fatalf("%s: encoding/json: %v", name, err)
		}
		assertSameJSON(t, name+" envelope", p, &std)

		for env := range p.Changes() {
			mine, std := typedView(t, env.Change)
			if mine == nil {
				if env.Change.Known() {
					t.Errorf("%s %s: known field %q has no typed view", name, env.Path(), env.Field())
				}
				continue
			}
			if env.Field() == FieldCalls {
				// encoding/json cannot route statuses[] by field: compare
				// the call statuses on their own.
				var calls struct {
					Statuses []CallStatus `json:"statuses"`
				}
				if err := json.Unmarshal(env.Change.Value, &calls); err != nil {
					t.Fatal(err)
				}
				assertSameJSON(t, name+" call statuses", env.Change.Messaging.CallStatuses, calls.Statuses)
				std.(*MessagingValue).Statuses = nil
			}
			assertSameJSON(t, fmt.Sprintf("%s %s (%s)", name, env.Path(), env.Field()), mine, std)
		}
	}
}

func assertSameJSON(t *testing.T, what string, mine, std any) {
	t.Helper()
	a, err := json.Marshal(mine)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(std)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%s:\n got %s\nwant %s (encoding/json)", what, a, b)
	}
}
