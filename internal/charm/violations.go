package charm

import (
	"errors"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	jskind "github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// SchemaViolation is one violation of a JSON Schema, at a leaf of the
// validator's error tree: charm parameters, manifest configs and plugin
// configs all report violations from this one walk, each naming the place
// in its own words.
type SchemaViolation struct {
	// At is the place in the instance, its JSON pointer's tokens.
	At []string
	// Msg says what is wrong there, without the place: "is required",
	// "is not allowed", "want string, got number".
	Msg string
	// Alts holds, for a value matching none of the alternatives of an
	// anyOf or oneOf, each alternative's violations (Msg then says it
	// matches none).
	Alts [][]SchemaViolation
}

// SchemaViolations returns the violations of a validation error in the
// order the validator found them; ok is false when err is not one.
func SchemaViolations(err error) (list []SchemaViolation, ok bool) {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, false
	}
	walkViolations(ve, &list)
	return list, true
}

// walkViolations appends a violation for each leaf of ve to out.
func walkViolations(ve *jsonschema.ValidationError, out *[]SchemaViolation) {
	here := ve.InstanceLocation
	at := func(extra string) []string {
		return append(append([]string(nil), here...), extra)
	}
	add := func(loc []string, msg string) { *out = append(*out, SchemaViolation{At: loc, Msg: msg}) }
	switch k := ve.ErrorKind.(type) {
	case *jskind.Required:
		for _, m := range k.Missing {
			add(at(m), "is required")
		}
		return
	case *jskind.AdditionalProperties:
		for _, p := range k.Properties {
			add(at(p), "is not allowed")
		}
		return
	case *jskind.FalseSchema:
		add(here, "is not allowed")
		return
	case *jskind.Type:
		add(here, "want "+strings.Join(k.Want, " or ")+", got "+k.Got)
		return
	case *jskind.Pattern:
		add(here, "want text matching "+k.Want+", got "+strconv.Quote(k.Got))
		return
	case *jskind.OneOf:
		if len(k.Subschemas) > 0 {
			add(here, "matches more than one of the schemas it may match only one of")
			return
		}
		*out = append(*out, noneOf(ve))
		return
	case *jskind.AnyOf:
		*out = append(*out, noneOf(ve))
		return
	}
	if len(ve.Causes) == 0 {
		p := message.NewPrinter(language.English)
		add(here, oneLine(ve.ErrorKind.LocalizedString(p)))
		return
	}
	for _, c := range ve.Causes {
		walkViolations(c, out)
	}
}

// noneOf is the violation of a value matching none of an anyOf's or a
// oneOf's alternatives, each alternative's violations in Alts.
func noneOf(ve *jsonschema.ValidationError) SchemaViolation {
	v := SchemaViolation{At: ve.InstanceLocation, Msg: "matches none of the schemas it may match"}
	for _, c := range ve.Causes {
		var alt []SchemaViolation
		walkViolations(c, &alt)
		v.Alts = append(v.Alts, alt)
	}
	return v
}

// Describe says the violation in a sentence, its place named by name:
// `parameter "name" is required`, `parameter "n": want integer, got
// string`; of alternatives, each one's violations joined by ", or ".
func (v SchemaViolation) Describe(name func(loc []string) string) string {
	if len(v.Alts) > 0 {
		alts := make([]string, len(v.Alts))
		for i, alt := range v.Alts {
			parts := make([]string, len(alt))
			for j, a := range alt {
				parts[j] = a.Describe(name)
			}
			alts[i] = strings.Join(parts, " and ")
		}
		return strings.Join(alts, ", or ")
	}
	place := name(v.At)
	switch {
	case place == "":
		return v.Msg
	case strings.HasPrefix(v.Msg, "is "):
		return place + " " + v.Msg
	}
	return place + ": " + v.Msg
}
