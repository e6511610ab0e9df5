//go:build linux

package linuxrunner

// What the external tests (tags_test.go) reach inside.

// TagsOff reports whether tagging is unavailable here.
func TagsOff() bool { return newTagger().off }

// NewTaggerArm returns a new tagger's arm.
func NewTaggerArm() func() uint64 { t := newTagger(); return t.arm }

// Tagged is tagged.
var Tagged = tagged

// Alive is alive.
var Alive = alive

// TagBase is tagBase.
const TagBase = tagBase
