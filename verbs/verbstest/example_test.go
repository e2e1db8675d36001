package verbstest_test

import (
	"fmt"

	"github.com/rdmago/rdmago/verbs/verbstest"
)

// The suite's cases, by name: what a device must do.
func ExampleCases() {
	cases := verbstest.Cases()
	fmt.Println(len(cases), "cases, from", cases[0], "to", cases[len(cases)-1])
	// Output: 47 cases, from Device/Query to Extended/QPEx_UD
}
