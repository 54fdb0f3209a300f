package embedetcd

import (
	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap/zapcore"
)

// zapCore forwards etcd's zap log entries to an hclog logger, so an operator
// reads one log format rather than hclog interleaved with raw JSON.
type zapCore struct {
	logger hclog.Logger
	fields []zapcore.Field
}

func newZapCore(l hclog.Logger) zapcore.Core { return &zapCore{logger: l} }

func (c *zapCore) Enabled(l zapcore.Level) bool {
	switch {
	case l >= zapcore.ErrorLevel:
		return c.logger.IsError()
	case l == zapcore.WarnLevel:
		return c.logger.IsWarn()
	default:
		return c.logger.IsDebug()
	}
}

func (c *zapCore) With(fields []zapcore.Field) zapcore.Core {
	return &zapCore{logger: c.logger, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		args = append(args, k, v)
	}
	switch {
	case e.Level >= zapcore.ErrorLevel:
		c.logger.Error(e.Message, args...)
	case e.Level == zapcore.WarnLevel:
		c.logger.Warn(e.Message, args...)
	case e.Level == zapcore.InfoLevel:
		c.logger.Debug(e.Message, args...)
	default:
		c.logger.Trace(e.Message, args...)
	}
	return nil
}

func (c *zapCore) Sync() error { return nil }
