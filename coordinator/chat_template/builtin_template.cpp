#include "coordinator/chat_template/builtin_template.h"

namespace ds {

const std::string& builtin_template_source() {
  static const std::string kSource = R"JINJA(
{#- Text of a message: a string, or content parts (text, image, video). -#}
{%- macro text_of(content) -%}
  {%- if content is string -%}
    {{- content -}}
  {%- elif content is iterable and content is not mapping -%}
    {%- for part in content -%}
      {%- if part.type == 'text' -%}
        {{- part.text -}}
      {%- elif part.type in ['image', 'image_url'] -%}
        {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
      {%- elif part.type == 'video' -%}
        {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}

{%- if not messages -%}
  {{- raise_exception('No messages provided.') -}}
{%- endif -%}

{#- The current query: the last user turn that is not just a tool-result wrapper. -#}
{%- set ns = namespace(last_query=-1) -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}
    {%- set t = text_of(m.content) | trim -%}
    {%- if not (t.startswith('<tool_response>') and t.endswith('</tool_response>')) -%}
      {%- set ns.last_query = loop.index0 -%}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if ns.last_query < 0 -%}
  {{- raise_exception('No user query found in messages.') -}}
{%- endif -%}

{%- set has_system = messages[0].role == 'system' -%}
{%- if tools -%}
  {{- '<|im_start|>system\n# Tools\n\nYou can call these functions:\n\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' ~ tool | tojson -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nTo call a function, answer with this block and nothing after it:\n\n' -}}
  {{- '<tool_call>\n<function=NAME>\n<parameter=ARGUMENT_NAME>\nARGUMENT_VALUE\n</parameter>\n</function>\n</tool_call>\n\n' -}}
  {{- 'Write one <parameter> block per argument; values may span several lines.' -}}
  {%- if has_system -%}
    {%- set sys = text_of(messages[0].content) | trim -%}
    {%- if sys -%}
      {{- '\n\n' ~ sys -}}
    {%- endif -%}
  {%- endif -%}
  {{- '<|im_end|>\n' -}}
{%- elif has_system -%}
  {{- '<|im_start|>system\n' ~ text_of(messages[0].content) | trim ~ '<|im_end|>\n' -}}
{%- endif -%}

{%- for m in messages -%}
  {%- set content = text_of(m.content) | trim -%}
  {%- if m.role == 'system' -%}
    {%- if not loop.first -%}
      {{- raise_exception('System message must be at the beginning.') -}}
    {%- endif -%}
  {%- elif m.role == 'user' -%}
    {{- '<|im_start|>user\n' ~ content ~ '<|im_end|>\n' -}}
  {%- elif m.role == 'assistant' -%}
    {%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}
    {%- if m.reasoning_content is not string and '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
      {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
    {%- endif -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if loop.index0 > ns.last_query -%}
      {{- '<think>\n' ~ reasoning | trim ~ '\n</think>\n\n' -}}
    {%- endif -%}
    {{- content -}}
    {%- if m.tool_calls is iterable and m.tool_calls is not mapping and m.tool_calls is not string -%}
      {%- for call in m.tool_calls -%}
        {%- set f = call.function if call.function is defined else call -%}
        {%- if not loop.first -%}
          {{- '\n' -}}
        {%- elif content -%}
          {{- '\n\n' -}}
        {%- endif -%}
        {{- '<tool_call>\n<function=' ~ f.name ~ '>\n' -}}
        {%- if f.arguments is mapping -%}
          {%- for name, value in f.arguments | items -%}
            {{- '<parameter=' ~ name ~ '>\n' -}}
            {%- if value is mapping or (value is sequence and value is not string) -%}
              {{- value | tojson -}}
            {%- else -%}
              {{- value | string -}}
            {%- endif -%}
            {{- '\n</parameter>\n' -}}
          {%- endfor -%}
        {%- endif -%}
        {{- '</function>\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or loop.previtem.role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' ~ content ~ '\n</tool_response>' -}}
    {%- if loop.last or loop.nextitem.role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- else -%}
    {{- raise_exception('Unexpected message role.') -}}
  {%- endif -%}
{%- endfor -%}

{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
  {{- '<think>\n\n</think>\n\n' if enable_thinking is false else '<think>\n' -}}
{%- endif -%}
)JINJA";
  return kSource;
}

}  // namespace ds
