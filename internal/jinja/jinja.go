package jinja

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
)

// MaxOutput bounds what one template renders to.
const MaxOutput = 64 << 10

// MaxRange bounds the items all calls of range() give in one rendering
// (the engine's own range has no bound), so that loops nested over ranges
// end soon.
const MaxRange = 10000

// maxErrorText bounds an engine error's text.
const maxErrorText = 300

// templateName is the one name the loader knows: the template itself.
const templateName = "/template"

// ErrTooLarge is returned for a template that renders to more than
// MaxOutput bytes.
var ErrTooLarge = fmt.Errorf("renders to more than %d bytes", MaxOutput)

// Options say how a template is rendered.
type Options struct {
	// KeepTrailingNewline keeps a final newline, as a file's content needs.
	KeepTrailingNewline bool
	// Whose names what renders, in the refusal of a file: "a claim's
	// template" reads no file.
	Whose string
}

// Render renders src with vars. A name not in vars is an error rather
// than empty text, so that a misspelt name is found; include, import,
// extends and from are refused, and so is any other name a template
// might load. The output is at most MaxOutput bytes, and range() gives at
// most MaxRange items in all; the time a template takes is otherwise
// bounded only by the loops its author writes over its vars. Errors are
// one line: "parse: ...", "render: ..." or ErrTooLarge.
func Render(src string, vars map[string]any, opts Options) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("template failed: %v", r)
		}
	}()
	whose := opts.Whose
	if whose == "" {
		whose = "a template"
	}
	cfg := config.New()
	cfg.StrictUndefined = true
	cfg.KeepTrailingNewline = opts.KeepTrailingNewline
	t, err := exec.NewTemplate(templateName, cfg, &loader{src: src, whose: whose}, environment(whose))
	if err != nil {
		// The engine quotes the whole source; the caller names the field.
		msg := strings.TrimPrefix(err.Error(), "failed to parse template '"+src+"': ")
		return "", oneLine("parse", msg)
	}
	w := &limitWriter{limit: MaxOutput}
	if err := t.Execute(w, exec.NewContext(vars)); err != nil {
		if w.over {
			return "", ErrTooLarge
		}
		return "", oneLine("render", strings.TrimPrefix(err.Error(), "unable to execute template: "))
	}
	return w.b.String(), nil
}

// environment is the engine's builtins without file access and with a
// range() drawing on one budget for the rendering.
func environment(whose string) *exec.Environment {
	cs := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	for _, name := range []string{"include", "import", "extends", "from"} {
		_ = cs.Replace(name, func(*parser.Parser, *parser.Parser) (nodes.ControlStructure, error) {
			return nil, fmt.Errorf("%s is not available: %s reads no file", name, whose)
		})
	}
	budget := &rangeBudget{left: MaxRange}
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("range", budget.rangeFunc)
	ctx.Set("lipsum", func(*exec.Evaluator, *exec.VarArgs) (string, error) {
		return "", errors.New("lipsum is not available")
	})
	return &exec.Environment{
		Context:           ctx,
		Filters:           builtins.Filters,
		Tests:             builtins.Tests,
		ControlStructures: cs,
		Methods:           builtins.Methods,
	}
}

// rangeBudget is how many more items range() may give in one rendering.
type rangeBudget struct{ left int }

// rangeFunc is Jinja's range([start, ]stop[, step]), as a list, drawing
// its items from the budget.
func (b *rangeBudget) rangeFunc(_ *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	start, stop, step := 0, 0, 1
	ints := make([]int, len(params.Args))
	for i, a := range params.Args {
		if !a.IsInteger() {
			return nil, errors.New("range: want integers")
		}
		ints[i] = a.Integer()
	}
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, errors.New("range: want [start, ]stop[, step]")
	}
	if step == 0 {
		return nil, errors.New("range: step is 0")
	}
	var out []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if b.left == 0 {
			return nil, fmt.Errorf("range: more than %d items in one template", MaxRange)
		}
		b.left--
		out = append(out, i)
	}
	return out, nil
}

// loader gives the template's own source once, for the template itself,
// and nothing else.
type loader struct {
	src   string
	whose string
	read  bool
}

func (l *loader) Read(name string) (io.Reader, error) {
	if name != templateName || l.read {
		return nil, fmt.Errorf("%q is not available: %s reads no file", name, l.whose)
	}
	l.read = true
	return strings.NewReader(l.src), nil
}

func (l *loader) Resolve(name string) (string, error) { return name, nil }

func (l *loader) Inherit(string) (loaders.Loader, error) {
	return &loader{read: true, whose: l.whose}, nil
}

// limitWriter keeps at most limit bytes and fails past them.
type limitWriter struct {
	b     strings.Builder
	limit int
	over  bool
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.limit {
		w.over = true
		return 0, ErrTooLarge
	}
	return w.b.Write(p)
}

// oneLine flattens an engine error to one bounded line after its step.
func oneLine(step, msg string) error {
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "..."
	}
	return fmt.Errorf("%s: %s", step, msg)
}
