package processor

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// accountEssentials is what stage 2 reads of an account_update value: its
// event, its ban, and its restrictions, bounded as stage 2 bounds a WABA's
// state (schema.MaxRestrictions, schema.CutAccountText), with withheld, if
// any, as wahook_withheld. It stands for a value that cannot go whole: one
// too large for EVENTS, or one withheld for its size (scrub), from which
// stage 2 read no ban, and lost it. It reads the restrictions one at a
// time, not the value as a tree. "" when raw is not a JSON object.
func accountEssentials(raw, withheld string) string {
	var v struct {
		Event        string          `json:"event"`
		Ban          *meta.BanInfo   `json:"ban_info"`
		Restrictions json.RawMessage `json:"restriction_info"`
	}
	if json.Unmarshal([]byte(raw), &v) != nil {
		return ""
	}
	out := struct {
		Event        string             `json:"event,omitempty"`
		Ban          *meta.BanInfo      `json:"ban_info,omitempty"`
		Restrictions []meta.Restriction `json:"restriction_info,omitempty"`
		Withheld     string             `json:"wahook_withheld,omitempty"`
	}{Event: schema.CutAccountText(v.Event), Withheld: withheld}
	if v.Ban != nil {
		out.Ban = &meta.BanInfo{WABABanState: schema.CutAccountText(v.Ban.WABABanState), WABABanDate: schema.CutAccountText(v.Ban.WABABanDate)}
	}
	// The others kept are the first by type, as stage 2 keeps them of
	// the whole value; a restriction it could not read makes the value
	// one it cannot read either ("": the event is bad, as it was).
	var others []meta.Restriction
	if d := json.NewDecoder(strings.NewReader(string(v.Restrictions))); len(v.Restrictions) > 0 {
		if t, err := d.Token(); err != nil || t != json.Delim('[') {
			return ""
		}
		for d.More() {
			var r meta.Restriction
			if d.Decode(&r) != nil {
				return ""
			}
			r = meta.Restriction{RestrictionType: schema.CutAccountText(r.RestrictionType), Expiration: meta.FlexString(schema.CutAccountText(string(r.Expiration)))}
			switch {
			case schema.BlockingRestriction(strings.ToUpper(r.RestrictionType)):
				if len(out.Restrictions) < schema.MaxRestrictions {
					out.Restrictions = append(out.Restrictions, r)
				}
			default:
				others = append(others, r)
				if len(others) > schema.MaxRestrictions {
					slices.SortFunc(others, byType)
					others = others[:schema.MaxRestrictions]
				}
			}
		}
	}
	slices.SortFunc(others, byType)
	out.Restrictions = append(out.Restrictions, others[:min(len(others), schema.MaxRestrictions-len(out.Restrictions))]...)
	b, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	return string(b)
}

// byType orders restrictions by type, as stage 2 does.
func byType(a, b meta.Restriction) int {
	return strings.Compare(strings.ToUpper(a.RestrictionType), strings.ToUpper(b.RestrictionType))
}
