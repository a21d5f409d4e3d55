import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import { renderTemplate, renderText, renderWithin, validateTemplate, type TemplateShape } from '../../src/domain/templates.ts';
import { SOURCE_TEMPLATE_SHAPE } from '../../src/engine/composition/subscriptions.ts';

// Templates (src/domain/templates.ts): pure, so no store; the same on both projects.

const context = {
  source: {
    id: 'ex_1',
    agent: 'coder',
    status: 'succeeded',
    result: { summary: { title: 'Fix a/b', lines: 12 }, tags: ['x', 'y'], 'a/b': 1, 'm~n': 2, ok: true, none: null },
    error: null,
    payload: { pr: 42 },
    trigger: 'schedule',
    schedule_id: null,
  },
};

describe('renderTemplate', () => {
  const cases: Array<[string, unknown, unknown]> = [
    ['plain text stays', 'hello', 'hello'],
    ['a string path interpolates', 'review {{source.id}} of {{ source.agent }}', 'review ex_1 of coder'],
    ['a whole placeholder keeps its type (number)', '{{source.payload#/pr}}', 42],
    ['a whole placeholder keeps its type (object)', '{{source.result#/summary}}', { title: 'Fix a/b', lines: 12 }],
    ['a whole placeholder keeps its type (boolean)', '{{source.result#/ok}}', true],
    ['a whole missing placeholder is null', '{{source.result#/nope}}', null],
    ['pointer into arrays', 'tag={{source.result#/tags/1}}', 'tag=y'],
    ['pointer escapes ~1 and ~0', '{{source.result#/a~1b}}-{{source.result#/m~0n}}', '1-2'],
    ['objects interpolate as compact JSON', 'r={{source.result#/summary}}', 'r={"title":"Fix a/b","lines":12}'],
    ['missing interpolates as empty', '[{{source.error.message}}]', '[]'],
    ['null interpolates as empty', '[{{source.result#/none}}]', '[]'],
    ['numbers interpolate as text', 'n={{source.payload.pr}}', 'n=42'],
    ['dotted path into a JSON value', '{{source.result.summary.title}}', 'Fix a/b'],
    ['empty pointer is the whole value', '{{source.payload#}}', { pr: 42 }],
    ['a pointer not starting with / finds nothing', 'x{{source.payload#pr}}', 'x'],
    ['no prototype lookups', '{{source.constructor}}|{{source.result.__proto__}}', '|'],
    ['non-placeholders stay literal', '{{ two words }} {x} {{', '{{ two words }} {x} {{'],
    [
      'arrays and objects are walked',
      { a: ['{{source.id}}', 1, null, { b: '{{source.payload#/pr}}' }] },
      { a: ['ex_1', 1, null, { b: 42 }] },
    ],
    ['object keys are literal', { '{{source.id}}': 'v' }, { '{{source.id}}': 'v' }],
    ['scalars pass through', 7, 7],
    ['null passes through', null, null],
  ];
  it.each(cases)('%s', (_name, template, expected) => {
    expect(renderTemplate(template, context)).toEqual(expected);
  });

  it('renderText always gives a string, even for one placeholder', () => {
    expect(renderText('{{source.payload}}', context)).toBe('{"pr":42}');
    expect(renderText('{{source.error}}', context)).toBe('');
  });

  it('a key named __proto__ in a template stays a plain key', () => {
    const out = renderTemplate(JSON.parse('{"__proto__": {"polluted": "{{source.id}}"}}'), context) as Record<string, unknown>;
    expect(Object.keys(out)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('renderWithin gives up on an output over the limit without building it', () => {
    const big = { source: { result: 'x'.repeat(10_000) } };
    expect(renderWithin('{{source.result}}', big, 20_000)).toBe('x'.repeat(10_000));
    expect(renderWithin('{{source.result}}{{source.result}}{{source.result}}', big, 20_000, true)).toBeUndefined();
    expect(renderWithin(Array(3).fill('{{source.result}}'), big, 20_000)).toBeUndefined();
    expect(renderWithin(Array(3).fill('{{source.result}}'), big, 40_000)).toHaveLength(3);
  });

  it('is total: any JSON template and context renders without throwing, and templates without placeholders are unchanged', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.jsonValue(), (template, ctx) => {
        renderTemplate(template, { source: ctx });
        const plain = JSON.parse(JSON.stringify(template).replace(/\{\{/g, '{ {')) as unknown;
        expect(renderTemplate(plain, { source: ctx })).toEqual(plain);
      }),
      { numRuns: 300 },
    );
  });

  it('a whole placeholder over a path round-trips any JSON value', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(renderTemplate('{{source.result}}', { source: { result: value } })).toEqual(value);
        expect(renderText('{{source.result}}', { source: { result: value } })).toBe(
          typeof value === 'string' ? value : value === null ? '' : JSON.stringify(value),
        );
      }),
      { numRuns: 300 },
    );
  });

  it('interpolation concatenates: the rendering of a+b is the rendering of a then of b', () => {
    const piece = fc.constantFrom('{{source.id}}', '{{source.result#/tags}}', 'text ', '{{source.error.message}}', '{ x }');
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), fc.array(piece, { maxLength: 8 }), (a, b) => {
        const [x, y] = [a.join(''), b.join('')];
        expect(renderText(x + y, context)).toBe(renderText(x, context) + renderText(y, context));
      }),
    );
  });
});

describe('validateTemplate', () => {
  const ok: unknown[] = [
    'no placeholders',
    '{{source.id}} {{source.result#/a/b}} {{source.payload.x.y}} {{source.error.message}} {{source.error}}',
    { a: ['{{source.result}}', 1] },
    '{ single braces }',
  ];
  it.each(ok)('accepts %j', (t) => expect(() => validateTemplate(t, SOURCE_TEMPLATE_SHAPE, 'body.message')).not.toThrow());

  const bad: Array<[unknown, RegExp]> = [
    ['{{sourc.id}}', /^body\.message: placeholder \{\{sourc\.id\}\}: unknown 'sourc' \(known: source\)$/],
    ['{{source.nope}}', /unknown 'source\.nope' \(known: source\.id, source\.agent/],
    ['{{source.id.x}}', /'source\.id' has no fields/],
    ['{{source.error.stack}}', /unknown 'source\.error\.stack'/],
    ['{{source.id#/x}}', /'source\.id' is not a JSON value a pointer can enter/],
    ['{{source.result#x}}', /a pointer starts with \//],
    ['{{source..id}}', /dot-separated names/],
    ['{{ two words }}', /'\{\{' without a valid placeholder/],
    [{ a: [1, { b: '{{x}}' }] }, /^body\.message\.a\[1\]\.b: placeholder \{\{x\}\}/],
  ];
  it.each(bad)('refuses %j naming the field', (t, message) => {
    let err: unknown;
    try {
      validateTemplate(t, SOURCE_TEMPLATE_SHAPE, 'body.message');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BatonError);
    expect((err as BatonError).code).toBe('validation_error');
    expect((err as BatonError).message).toMatch(message);
  });

  it("'*' matches any segment (a group's members by position)", () => {
    const shape: TemplateShape = { group: { id: 'leaf' }, members: { '*': { result: 'any', status: 'leaf' } } };
    expect(() => validateTemplate('{{members.0.result#/x}} {{group.id}}', shape, 'body.join.message')).not.toThrow();
    expect(() => validateTemplate('{{members.0.nope}}', shape, 'body.join.message')).toThrow(/unknown 'members\.0\.nope'/);
  });

  it('an index past the end of an array of known length is refused, naming the range (a join over a group of 3)', () => {
    const shape: TemplateShape = { members: { '*': { result: 'any' } } };
    const arrays = { members: 3 };
    expect(() => validateTemplate('{{members.2.result}}', shape, 'body.join.message', arrays)).not.toThrow();
    for (const bad of ['{{members.3.result}}', '{{members.99999999999999999999.result}}', '{{members.first.result}}'])
      expect(() => validateTemplate(bad, shape, 'body.join.message', arrays), bad).toThrow(
        /^body\.join\.message: placeholder .*: 'members\.\w+' is not one of members\.0 to members\.2$/,
      );
  });
});
