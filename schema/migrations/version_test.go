package migrations

import "testing"

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in      string
		want    Version
		wantErr bool
	}{
		{in: "18.16.1", want: Version{18, 16, 1, 0}},
		{in: "24.8.4.13", want: Version{24, 8, 4, 13}},
		{in: " 23.8.9.54-lts\n", want: Version{23, 8, 9, 54}},
		{in: "22.8.15.25.altinitystable", want: Version{22, 8, 15, 25}},
		{in: "19.3", want: Version{19, 3, 0, 0}},
		{in: "25.10.1.3832-stable", want: Version{25, 10, 1, 3832}},
		{in: "", wantErr: true},
		{in: "19", wantErr: true},
		{in: "v24.3.1", wantErr: true},
		{in: "twenty", wantErr: true},
		{in: "1234567890.1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseVersion(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseVersion(%q) = %v, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseVersion(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseVersion(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestVersionAtLeast(t *testing.T) {
	tests := []struct {
		v            Version
		major, minor int
		want         bool
	}{
		{Version{18, 16, 1, 0}, 19, 3, false},
		{Version{19, 3, 0, 0}, 19, 3, true},
		{Version{19, 2, 9, 0}, 19, 3, false},
		{Version{19, 10, 0, 0}, 19, 3, true},
		{Version{20, 1, 0, 0}, 19, 6, true},
		{Version{24, 8, 4, 13}, 20, 1, true},
	}
	for _, tt := range tests {
		if got := tt.v.AtLeast(tt.major, tt.minor); got != tt.want {
			t.Errorf("%v.AtLeast(%d, %d) = %t, want %t", tt.v, tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestFeaturesFor(t *testing.T) {
	tests := []struct {
		version string
		want    Features
	}{
		{"18.16.1", Features{}},
		{"19.1.6", Features{}},
		{"19.3.3", Features{LowCardinality: true}},
		{"19.6.2.11", Features{LowCardinality: true, TTL: true}},
		{"19.17.4.11", Features{LowCardinality: true, TTL: true}},
		{"20.1.2.4", Features{LowCardinality: true, TTL: true, DateTime64: true}},
		{"24.8.4.13", Features{LowCardinality: true, TTL: true, DateTime64: true}},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			v, err := ParseVersion(tt.version)
			if err != nil {
				t.Fatal(err)
			}
			if got := FeaturesFor(v); got != tt.want {
				t.Errorf("FeaturesFor(%s) = {%v}, want {%v}", tt.version, got, tt.want)
			}
		})
	}
}
