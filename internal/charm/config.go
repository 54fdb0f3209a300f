package charm

import (
	"math"
	"regexp"
	"strconv"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.yaml.in/yaml/v3"
)

// The types a config option may have.
const (
	TypeString  = "string"
	TypeInt     = "int"
	TypeFloat   = "float"
	TypeBoolean = "boolean"
)

const configFile = "config.yaml"

// Config is a charm's config.yaml. A charm without config.yaml has an empty
// Config. The methods accept a nil *Config as one with no options.
type Config struct {
	Options map[string]Option
}

// Option is one configuration option.
type Option struct {
	// Type is TypeString, TypeInt, TypeFloat or TypeBoolean.
	Type string
	// Default is nil (no default: the option is unset until configured) or
	// a value of the option's type: string, int64, float64 or bool.
	Default     any
	Description string
}

var optionNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*([-_.][a-zA-Z0-9]+)*$`)

// ValidOptionName reports whether name can name a config option (and so be
// the key of a KEY=VALUE argument): letters and digits, starting with a
// letter, with single "-", "_" or "." between them, at most 63
// characters. Capitals are allowed, as Juju allows them (zabbix-agent's
// Server, PidFile); names differing only in case are different options.
func ValidOptionName(name string) bool {
	return len(name) <= 63 && optionNameRE.MatchString(name)
}

// ParseConfig parses and validates config.yaml. Unknown keys are tolerated;
// known keys of the wrong type are not. An option without a type is a
// string; a default must be of the option's type (an integer will do for a
// float).
func ParseConfig(data []byte) (*Config, error) {
	f := &yamlFile{name: configFile}
	c := &Config{Options: map[string]Option{}}
	top, err := f.parse(data)
	if err != nil || top == nil {
		return c, err
	}
	pairs, err := f.mapping("", top)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		if p.key != "options" {
			continue
		}
		opts, err := f.mapping(p.key, p.value)
		if err != nil {
			return nil, err
		}
		for _, o := range opts {
			if !ValidOptionName(o.key) {
				return nil, f.errorf("options", "option name %q is invalid: use letters and digits, starting with a letter, with single - _ or . between them", o.key)
			}
			opt, err := parseOption(f, join("options", o.key), o.value)
			if err != nil {
				return nil, err
			}
			c.Options[o.key] = opt
		}
	}
	return c, nil
}

func parseOption(f *yamlFile, field string, n *yaml.Node) (Option, error) {
	opt := Option{Type: TypeString}
	pairs, err := f.mapping(field, n)
	if err != nil {
		return opt, err
	}
	var def *yaml.Node
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		pf := join(field, p.key)
		switch p.key {
		case "type":
			if opt.Type, err = f.text(pf, p.value); err != nil {
				return opt, err
			}
			switch opt.Type {
			case TypeString, TypeInt, TypeFloat, TypeBoolean:
			default:
				return opt, f.errorf(pf, "%q is invalid: want string, int, float or boolean", opt.Type)
			}
		case "description":
			if opt.Description, err = f.text(pf, p.value); err != nil {
				return opt, err
			}
		case "default":
			def = p.value
		}
	}
	if def != nil {
		if opt.Default, err = defaultValue(opt.Type, def); err != nil {
			return opt, f.errorf(join(field, "default"), "%v", err)
		}
	}
	return opt, nil
}

// defaultValue converts a YAML scalar to a value of type typ. Strings must be
// YAML strings (quote "1.10" to keep it from being a number).
func defaultValue(typ string, n *yaml.Node) (any, error) {
	bad := invalidf("want %s, got %s", typeNoun(typ), describe(n))
	if n.Kind != yaml.ScalarNode {
		return nil, bad
	}
	tag := n.ShortTag()
	switch typ {
	case TypeString:
		if tag == "!!str" {
			return n.Value, nil
		}
		return nil, invalidf("want a string, got %s (quote it)", n.Value)
	case TypeInt:
		var i int64
		if tag == "!!int" && n.Decode(&i) == nil {
			return i, nil
		}
	case TypeFloat:
		var x float64
		if (tag == "!!int" || tag == "!!float") && n.Decode(&x) == nil && finite(x) {
			return x, nil
		}
	case TypeBoolean:
		var b bool
		if tag == "!!bool" && n.Decode(&b) == nil {
			return b, nil
		}
	}
	return nil, bad
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// typeNoun names a type with its article, for error messages.
func typeNoun(typ string) string {
	switch typ {
	case TypeInt:
		return "an int"
	case TypeFloat:
		return "a float"
	case TypeBoolean:
		return "a boolean (true or false)"
	}
	return "a string"
}

// Defaults returns the options' defaults; options without one are absent.
func (c *Config) Defaults() map[string]*pb.ConfigValue {
	values := map[string]*pb.ConfigValue{}
	if c == nil {
		return values
	}
	for name, opt := range c.Options {
		if v := toValue(opt.Default); v != nil {
			values[name] = v
		}
	}
	return values
}

// WithDefaults returns the defaults overlaid with values: what a service's
// hooks see. values is not modified.
func (c *Config) WithDefaults(values map[string]*pb.ConfigValue) map[string]*pb.ConfigValue {
	all := c.Defaults()
	for name, v := range values {
		all[name] = v
	}
	return all
}

func toValue(v any) *pb.ConfigValue {
	switch v := v.(type) {
	case string:
		return &pb.ConfigValue{Value: &pb.ConfigValue_StringValue{StringValue: v}}
	case int64:
		return &pb.ConfigValue{Value: &pb.ConfigValue_IntValue{IntValue: v}}
	case float64:
		return &pb.ConfigValue{Value: &pb.ConfigValue_FloatValue{FloatValue: v}}
	case bool:
		return &pb.ConfigValue{Value: &pb.ConfigValue_BoolValue{BoolValue: v}}
	}
	return nil
}

// ParseValues converts settings given as text (from KEY=VALUE arguments) to
// typed values. Every key must be an option of the charm and every value
// of its option's type: a string as is (empty included), an int in decimal,
// a float as strconv.ParseFloat reads it (finite), a boolean as
// strconv.ParseBool reads it ("true", "false", "1", "0", ...).
func (c *Config) ParseValues(settings map[string]string) (map[string]*pb.ConfigValue, error) {
	values := make(map[string]*pb.ConfigValue, len(settings))
	for _, name := range sortedKeys(settings) {
		opt, err := c.option(name)
		if err != nil {
			return nil, err
		}
		v, err := parseValue(opt.Type, settings[name])
		if err != nil {
			return nil, invalidf("config option %q wants %s, got %q", name, typeNoun(opt.Type), settings[name])
		}
		values[name] = v
	}
	return values, nil
}

func (c *Config) option(name string) (Option, error) {
	var opt Option
	ok := false
	if c != nil {
		opt, ok = c.Options[name]
	}
	if !ok {
		return opt, invalidf("unknown config option %q", name)
	}
	return opt, nil
}

func parseValue(typ, s string) (*pb.ConfigValue, error) {
	switch typ {
	case TypeInt:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, err
		}
		return toValue(i), nil
	case TypeFloat:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || !finite(x) {
			return nil, invalidf("not a finite float")
		}
		return toValue(x), nil
	case TypeBoolean:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, err
		}
		return toValue(b), nil
	}
	return toValue(s), nil
}

// Validate checks typed values against the options: every key an option,
// every value set and of its option's exact type (a float option wants a
// FloatValue), floats finite.
func (c *Config) Validate(values map[string]*pb.ConfigValue) error {
	for _, name := range sortedKeys(values) {
		opt, err := c.option(name)
		if err != nil {
			return err
		}
		v := values[name]
		ok := false
		switch opt.Type {
		case TypeString:
			_, ok = v.GetValue().(*pb.ConfigValue_StringValue)
		case TypeInt:
			_, ok = v.GetValue().(*pb.ConfigValue_IntValue)
		case TypeFloat:
			_, ok = v.GetValue().(*pb.ConfigValue_FloatValue)
			ok = ok && finite(v.GetFloatValue())
		case TypeBoolean:
			_, ok = v.GetValue().(*pb.ConfigValue_BoolValue)
		}
		if !ok {
			return invalidf("config option %q wants %s, got %s", name, typeNoun(opt.Type), describeValue(v))
		}
	}
	return nil
}

func describeValue(v *pb.ConfigValue) string {
	switch v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		return strconv.Quote(v.GetStringValue())
	case nil:
		return "no value"
	}
	return FormatValue(v)
}

// FormatValue renders a value as text that ParseValues reads back to the
// same value for an option of its type (for ctl config and config-get). An
// unset value renders as "".
func FormatValue(v *pb.ConfigValue) string {
	switch x := v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		return x.StringValue
	case *pb.ConfigValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *pb.ConfigValue_FloatValue:
		return strconv.FormatFloat(x.FloatValue, 'g', -1, 64)
	case *pb.ConfigValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return ""
}
