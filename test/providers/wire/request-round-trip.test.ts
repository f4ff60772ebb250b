import t from 'tap';
import {
  type AnthropicMessagesRequest,
  anthropicRequestToOpenai,
  type ChatCompletionRequest,
  openaiRequestToAnthropic,
} from '../../../src/providers/wire/index.js';

t.test('Anthropic request → OpenAI → Anthropic', async (t) => {
  const original: AnthropicMessagesRequest = {
    model: 'claude-sonnet-4-5',
    max_tokens: 2048,
    system: 'You are a careful assistant.',
    messages: [
      { role: 'user', content: 'Find the invoice and email it.' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Looking it up.' },
          { type: 'tool_use', id: 'toolu_1', name: 'find_invoice', input: { number: 'INV-7', year: 2024 } },
          { type: 'tool_use', id: 'toolu_2', name: 'lookup_contact', input: { name: 'Ada' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"total": 120}' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: 'not found', is_error: true },
          { type: 'text', text: 'Use the billing address instead.' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
        ],
      },
    ],
    tools: [
      {
        name: 'find_invoice',
        description: 'Find an invoice',
        input_schema: { type: 'object', properties: { number: { type: 'string' } } },
      },
    ],
    tool_choice: { type: 'tool', name: 'find_invoice', disable_parallel_tool_use: true },
    stop_sequences: ['</done>'],
    top_p: 0.9,
    temperature: 0.6,
    stream: true,
    metadata: { user_id: 'subject-1' },
  };
  const back = openaiRequestToAnthropic(anthropicRequestToOpenai(original), { defaultMaxTokens: 1 });
  t.equal(back.temperature, 0.6, 'an Anthropic temperature reaches Anthropic unchanged');
  t.strictSame(back, original);
});

t.test('OpenAI request → Anthropic → OpenAI', async (t) => {
  const original: ChatCompletionRequest = {
    model: 'claude-sonnet-4-5',
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Oslo?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '-3C' },
      { role: 'assistant', content: 'It is -3C in Oslo.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'And this place?' },
          { type: 'image_url', image_url: { url: 'https://example.com/p.jpg' } },
        ],
      },
    ],
    tools: [
      {
        type: 'function',
        function: { name: 'weather', description: 'Weather', parameters: { type: 'object', properties: {} } },
      },
    ],
    tool_choice: 'required',
    max_tokens: 300,
    stop: ['\n\n'],
    user: 'subject-2',
  };
  const back = anthropicRequestToOpenai(openaiRequestToAnthropic(original, { defaultMaxTokens: 1 }));
  t.strictSame(back, original);
});
