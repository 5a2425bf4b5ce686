package processor

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// Bounds of an account event's essentials: each string cut to
// maxEssentialText bytes, at most maxEssentialRestrictions restrictions
// (stage 2 keeps no more in a WABA's state).
const (
	maxEssentialText         = 64
	maxEssentialRestrictions = 16
)

// accountEssentials is what stage 2 reads of an account_update value: its
// event, its ban, and its restrictions (at most maxEssentialRestrictions,
// those that stop sending first), each string cut to maxEssentialText
// bytes, with withheld, if any, as wahook_withheld. It stands for a value
// that cannot go whole: one too large for EVENTS, or one withheld for its
// size (scrub), from which stage 2 read no ban, and lost it. It reads the
// restrictions one at a time, not the value as a tree. "" when raw is not
// a JSON object.
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
	}{Event: cutText(v.Event), Withheld: withheld}
	if v.Ban != nil {
		out.Ban = &meta.BanInfo{WABABanState: cutText(v.Ban.WABABanState), WABABanDate: cutText(v.Ban.WABABanDate)}
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
			r = meta.Restriction{RestrictionType: cutText(r.RestrictionType), Expiration: meta.FlexString(cutText(string(r.Expiration)))}
			switch t := strings.ToUpper(r.RestrictionType); {
			case t == schema.RestrictBusinessInitiated || t == schema.RestrictCustomerInitiated:
				if len(out.Restrictions) < maxEssentialRestrictions {
					out.Restrictions = append(out.Restrictions, r)
				}
			default:
				others = append(others, r)
				if len(others) > maxEssentialRestrictions {
					slices.SortFunc(others, func(a, b meta.Restriction) int {
						return strings.Compare(strings.ToUpper(a.RestrictionType), strings.ToUpper(b.RestrictionType))
					})
					others = others[:maxEssentialRestrictions]
				}
			}
		}
	}
	slices.SortFunc(others, func(a, b meta.Restriction) int {
		return strings.Compare(strings.ToUpper(a.RestrictionType), strings.ToUpper(b.RestrictionType))
	})
	out.Restrictions = append(out.Restrictions, others[:min(len(others), maxEssentialRestrictions-len(out.Restrictions))]...)
	b, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	return string(b)
}

// cutText is s cut to maxEssentialText bytes, on a character's start.
func cutText(s string) string {
	if len(s) <= maxEssentialText {
		return s
	}
	n := maxEssentialText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
