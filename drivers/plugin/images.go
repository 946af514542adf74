package plugin

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
	"github.com/berthdev/berth/images"
)

// Image identity, capture, template delete and the provider's images, on
// both sides.

func (s *server) ImageIdentity(ctx context.Context, r *pluginpb.HandleRequest) (*pluginpb.TextReply, error) {
	sb, err := s.sandbox(r.GetHandle())
	if err != nil {
		return &pluginpb.TextReply{Error: errorToWire(err)}, nil
	}
	ir, ok := sb.(drivers.ImageReporter)
	if !ok {
		return &pluginpb.TextReply{Error: errorToWire(fmt.Errorf("sandbox %q: capability image_identity: %w", sb.ID(), drivers.ErrUnsupported))}, nil
	}
	id, err := ir.ImageIdentity(ctx)
	return &pluginpb.TextReply{Text: id.String(), Error: errorToWire(err)}, nil
}

func (s *server) Capture(ctx context.Context, r *pluginpb.CaptureRequest) (*pluginpb.TextReply, error) {
	sb, err := s.sandbox(r.GetHandle())
	if err != nil {
		return &pluginpb.TextReply{Error: errorToWire(err)}, nil
	}
	c, ok := sb.(drivers.Capturer)
	if !ok {
		return &pluginpb.TextReply{Error: errorToWire(fmt.Errorf("sandbox %q: capability template_capture: %w", sb.ID(), drivers.ErrUnsupported))}, nil
	}
	id, err := c.Capture(ctx, drivers.CaptureRequest{Name: r.GetName(), Labels: r.GetLabels()})
	return &pluginpb.TextReply{Text: id.String(), Error: errorToWire(err)}, nil
}

func (s *server) DeleteTemplate(ctx context.Context, r *pluginpb.DeleteTemplateRequest) (*pluginpb.ReceiptReply, error) {
	td, ok := s.d.(drivers.TemplateDeleter)
	if !ok {
		return &pluginpb.ReceiptReply{Error: errorToWire(fmt.Errorf("delete template: %w", drivers.ErrUnsupported))}, nil
	}
	id, err := images.ParseIdentity(r.GetIdentity())
	if err != nil {
		return &pluginpb.ReceiptReply{Error: errorToWire(fmt.Errorf("delete template: identity %q: %w: %w", r.GetIdentity(), err, config.ErrInvalid))}, nil
	}
	rc, err := td.DeleteTemplate(ctx, configFromWire(r.GetConfig()), id)
	return &pluginpb.ReceiptReply{Receipt: receiptToWire(rc), Error: errorToWire(err)}, nil
}

func (s *server) ListImages(ctx context.Context, r *pluginpb.ListImagesRequest) (*pluginpb.ListImagesReply, error) {
	l, ok := s.d.(drivers.ImageLister)
	if !ok {
		return &pluginpb.ListImagesReply{Error: errorToWire(fmt.Errorf("list images: %w", drivers.ErrUnsupported))}, nil
	}
	choices, err := l.ListImages(ctx, configFromWire(r.GetConfig()), r.GetMatch())
	if err != nil {
		return &pluginpb.ListImagesReply{Error: errorToWire(err)}, nil
	}
	out := &pluginpb.ListImagesReply{Images: make([]*pluginpb.ImageChoice, 0, len(choices))}
	for _, ch := range choices {
		out.Images = append(out.Images, &pluginpb.ImageChoice{Value: ch.Value, Name: ch.Name, Source: ch.Source, State: ch.State, Usable: ch.Usable})
	}
	return out, nil
}

// identityFromWire parses the identity a reply carries, or returns its
// error.
func (c *client) identityFromWire(ctx context.Context, op string, r *pluginpb.TextReply, err error) (images.Identity, error) {
	if err != nil {
		return images.Identity{}, c.callErr(ctx, op, err)
	}
	if err := errorFromWire(c.name(), r.GetError()); err != nil {
		return images.Identity{}, err
	}
	id, err := images.ParseIdentity(r.GetText())
	if err != nil {
		return images.Identity{}, fmt.Errorf("plugin %s: %s: identity %q: %w", c.p.Binary, op, r.GetText(), err)
	}
	return id, nil
}

// imageReporter, capturer and templateDeleter give the host's sandbox and
// driver the optional interfaces of those capabilities; imageLister gives
// the driver of a plugin whose driver lists the provider's images
// (description's images) its drivers.ImageLister.
type (
	imageReporter   struct{ s *sandbox }
	capturer        struct{ s *sandbox }
	templateDeleter struct{ c *client }
	imageLister     struct{ c *client }
)

// ImageIdentity implements drivers.ImageReporter through the plugin.
func (x imageReporter) ImageIdentity(ctx context.Context) (images.Identity, error) {
	rpc, handle, err := x.s.live(ctx)
	if err != nil {
		return images.Identity{}, err
	}
	r, err := rpc.ImageIdentity(ctx, &pluginpb.HandleRequest{Handle: handle})
	return x.s.c.identityFromWire(ctx, "image identity", r, err)
}

// Capture implements drivers.Capturer through the plugin.
func (x capturer) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	rpc, handle, err := x.s.live(ctx)
	if err != nil {
		return images.Identity{}, err
	}
	r, err := rpc.Capture(ctx, &pluginpb.CaptureRequest{Handle: handle, Name: req.Name, Labels: req.Labels})
	return x.s.c.identityFromWire(ctx, "capture", r, err)
}

// DeleteTemplate implements drivers.TemplateDeleter through the plugin.
func (x templateDeleter) DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (drivers.Receipt, error) {
	rpc, err := x.c.conn(ctx)
	if err != nil {
		return drivers.Receipt{}, err
	}
	r, err := rpc.DeleteTemplate(ctx, &pluginpb.DeleteTemplateRequest{Config: configToWire(cfg), Identity: id.String()})
	if err != nil {
		return drivers.Receipt{}, x.c.callErr(ctx, "delete template", err)
	}
	return receiptFromWire(r.GetReceipt()), errorFromWire(x.c.name(), r.GetError())
}

// ListImages implements drivers.ImageLister through the plugin.
func (x imageLister) ListImages(ctx context.Context, cfg config.Config, match string) ([]drivers.ImageChoice, error) {
	rpc, err := x.c.conn(ctx)
	if err != nil {
		return nil, err
	}
	r, err := rpc.ListImages(ctx, &pluginpb.ListImagesRequest{Config: configToWire(cfg), Match: match})
	if err != nil {
		return nil, x.c.callErr(ctx, "list images", err)
	}
	if err := errorFromWire(x.c.name(), r.GetError()); err != nil {
		return nil, err
	}
	out := make([]drivers.ImageChoice, 0, len(r.GetImages()))
	for _, w := range r.GetImages() {
		out = append(out, drivers.ImageChoice{Value: w.GetValue(), Name: w.GetName(), Source: w.GetSource(), State: w.GetState(), Usable: w.GetUsable()})
	}
	return out, nil
}
