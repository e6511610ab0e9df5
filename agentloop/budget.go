package agentloop

import (
	"fmt"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

const (
	// defaultContextWindow fits today's common hosted models; small local models need
	// Agent.ContextWindow set.
	defaultContextWindow = 128_000
	// imageTokens is what one image part is assumed to cost: its base64 bytes say nothing
	// about its tokens, which depend on its size in tiles (a 512px tile is ~170 at high
	// detail, plus a base charge); a plot is a few tiles.
	imageTokens = 800
	// messageOverhead is the per-message framing (role, separators) the API counts.
	messageOverhead = 4
	// keepHead and keepTail are how much of an old tool output survives shortening: the
	// start usually says what ran, the end how it ended.
	keepHead = 300
	keepTail = 200
	// minShorten is the shortest output worth cutting; it is longer than any shortened
	// output, so nothing is shortened twice.
	minShorten = 1024
	// shortenedMarker begins the note that replaces what was cut.
	shortenedMarker = "[agentloop: "
)

// budget estimates request sizes in tokens and shortens old tool outputs to fit a window.
type budget struct {
	window  int     // the model's context window
	reserve int     // kept free for the reply
	perByte float64 // tokens per byte, learned from reported usage (1/4 until then)
}

func newBudget(window int) *budget {
	if window <= 0 {
		window = defaultContextWindow
	}
	return &budget{window: window, reserve: min(window/4, 8192), perByte: 0.25}
}

// limit is the most a request may hold.
func (b *budget) limit() int { return b.window - b.reserve }

// requestBytes counts what a request's text costs: contents, tool calls and the tool
// definitions (the API counts those in the prompt too). Images are counted separately.
func requestBytes(msgs []goopenai.ChatCompletionMessage, toolBytes int) (bytes, images int) {
	bytes = toolBytes
	for _, m := range msgs {
		bytes += len(m.Content) + len(m.Refusal) + messageOverhead*4
		for _, p := range m.MultiContent {
			if p.Type == goopenai.ChatMessagePartTypeImageURL {
				images++
			} else {
				bytes += len(p.Text)
			}
		}
		for _, c := range m.ToolCalls {
			bytes += len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments)
		}
	}
	return bytes, images
}

// estimate returns the request's size in tokens.
func (b *budget) estimate(msgs []goopenai.ChatCompletionMessage, toolBytes int) int {
	n, images := requestBytes(msgs, toolBytes)
	return int(float64(n)*b.perByte) + images*imageTokens
}

// learn calibrates the estimate from the prompt tokens the endpoint reported for a request.
func (b *budget) learn(msgs []goopenai.ChatCompletionMessage, toolBytes, promptTokens int) {
	n, images := requestBytes(msgs, toolBytes)
	text := promptTokens - images*imageTokens
	if n == 0 || text <= 0 {
		return
	}
	// Bounded so that one odd report (a cached prompt counted differently, say) cannot make
	// the estimate absurd.
	b.perByte = min(max(float64(text)/float64(n), 0.05), 1)
}

// fit shortens older tool outputs, oldest first, when the request would not fit; messages
// from index keep on (the latest turn's results) are left alone. It returns the estimate
// after shortening and how many messages it shortened. Once it starts it goes down to three
// quarters of the limit, so that the next steps do not each shorten one more message.
func (b *budget) fit(msgs []goopenai.ChatCompletionMessage, keep, toolBytes int) (est, shortened int) {
	est = b.estimate(msgs, toolBytes)
	if est <= b.limit() {
		return est, 0
	}
	target := b.limit() * 3 / 4
	for i := 0; i < keep && i < len(msgs) && est > target; i++ {
		if !shorten(&msgs[i]) {
			continue
		}
		shortened++
		est = b.estimate(msgs, toolBytes)
	}
	return est, shortened
}

// shorten cuts an old tool output to its start and end, or replaces the images of an old
// image message with a note. It reports whether it changed anything.
func shorten(m *goopenai.ChatCompletionMessage) bool {
	switch {
	case m.Role == goopenai.ChatMessageRoleTool && len(m.Content) > minShorten:
		head, _ := toolkit.Truncate(m.Content, keepHead)
		tail, _ := toolkit.TruncateTail(m.Content, keepTail)
		cut := len(m.Content) - len(head) - len(tail)
		m.Content = fmt.Sprintf("%s\n%s%d bytes of this old tool output were removed to keep the conversation within the model's context window; run the tool again if you need them]\n%s",
			head, shortenedMarker, cut, tail)
		return true
	case m.Role == goopenai.ChatMessageRoleUser && len(m.MultiContent) > 0:
		var text string
		images := 0
		for _, p := range m.MultiContent {
			if p.Type == goopenai.ChatMessagePartTypeImageURL {
				images++
			} else if text == "" {
				text = p.Text
			}
		}
		if images == 0 {
			return false
		}
		m.MultiContent = nil
		m.Content = fmt.Sprintf("%s\n%s%d image(s) removed to keep the conversation within the model's context window]", text, shortenedMarker, images)
		return true
	}
	return false
}
