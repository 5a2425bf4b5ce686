package migrations

import "fmt"

// Features are the server features that migrations may use where the server
// has them. The base schema needs none of them: it runs on 18.16.
type Features struct {
	// LowCardinality: the LowCardinality(T) type without an experimental
	// setting (19.3; 18.16 has it only behind
	// allow_experimental_low_cardinality_type).
	LowCardinality bool
	// TTL: table and column TTL expressions, used for retention (19.6).
	TTL bool
	// DateTime64: the DateTime64(precision) type (20.1).
	DateTime64 bool
}

// featureTable says from which release on each feature is used.
var featureTable = []struct {
	name         string
	major, minor int
	set          func(*Features)
}{
	{"LowCardinality", 19, 3, func(f *Features) { f.LowCardinality = true }},
	{"TTL", 19, 6, func(f *Features) { f.TTL = true }},
	{"DateTime64", 20, 1, func(f *Features) { f.DateTime64 = true }},
}

// FeaturesFor returns the features that a server of version v has.
func FeaturesFor(v Version) Features {
	var f Features
	for _, row := range featureTable {
		if v.AtLeast(row.major, row.minor) {
			row.set(&f)
		}
	}
	return f
}

func (f Features) String() string {
	return fmt.Sprintf("LowCardinality=%t TTL=%t DateTime64=%t", f.LowCardinality, f.TTL, f.DateTime64)
}
