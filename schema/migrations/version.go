package migrations

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a ClickHouse server version as SELECT version() reports it, such
// as 18.16.1 (Debian) or 24.8.4.13 (upstream).
type Version struct {
	Major, Minor, Patch, Build int
}

// ParseVersion parses the leading dotted numbers of s and ignores a suffix
// such as "-lts" or ".altinitystable". It needs at least major and minor.
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	var nums [4]int
	n := 0
	rest := s
	for n < len(nums) {
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if end == 0 || end > 9 {
			break
		}
		nums[n], _ = strconv.Atoi(rest[:end])
		n++
		rest = rest[end:]
		if !strings.HasPrefix(rest, ".") {
			break
		}
		rest = rest[1:]
	}
	if n < 2 {
		return Version{}, fmt.Errorf("parse server version %q: want MAJOR.MINOR[.PATCH[.BUILD]]", s)
	}
	return Version{Major: nums[0], Minor: nums[1], Patch: nums[2], Build: nums[3]}, nil
}

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	if v.Major != major {
		return v.Major > major
	}
	return v.Minor >= minor
}

func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Build != 0 {
		s += fmt.Sprintf(".%d", v.Build)
	}
	return s
}
