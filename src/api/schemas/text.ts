import { z } from 'zod';

/**
 * Text stored in a column: valid Unicode without NUL. PostgreSQL text cannot hold U+0000, and a
 * lone surrogate (\ud800 in JSON, not a character) is no text either: PostgreSQL's JSON parser
 * refuses it, the drivers turn it into U+FFFD, each store differently. Every store refuses both here.
 */
export const TEXT_CHARS = /^(?:[^\u0000\ud800-\udfff]|[\ud800-\udbff][\udc00-\udfff])*$/;
export const TEXT_CHARS_MESSAGE = 'must be text without NUL (\\u0000) characters or lone surrogates';
export const Text = z.string().regex(TEXT_CHARS, TEXT_CHARS_MESSAGE);
