package embedetcd

import (
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap/zapcore"
)

// zapCore forwards etcd's zap log entries to an hclog logger, so an operator
// reads one log format rather than hclog interleaved with raw JSON.
type zapCore struct {
	logger hclog.Logger
	fields []zapcore.Field
	// closing is set when the server is being closed: etcd then logs its
	// listeners' expected failures as errors, which only alarm a reader.
	closing *atomic.Bool
}

func newZapCore(l hclog.Logger, closing *atomic.Bool) zapcore.Core {
	return &zapCore{logger: l, closing: closing}
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	if c.closing.Load() {
		return false
	}
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
	return &zapCore{logger: c.logger, closing: c.closing, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// benign are warnings etcd gives about choices this package made on
// purpose for a member that only the controller reaches, over a socket in
// its data directory; they are logged at debug level.
var benign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (c *zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if benign[e.Message] {
		e.Level = zapcore.DebugLevel
		if !c.logger.IsDebug() {
			return nil
		}
	}
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
