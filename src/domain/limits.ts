/**
 * Column bounds that numeric inputs are checked against, so a value the database cannot hold is
 * a 400 naming the field rather than a database error.
 */

/** INTEGER columns (32-bit on PostgreSQL): log seq, attempts, priorities, settings. */
export const INT32_MAX = 2_147_483_647;

/** Longest task message, in characters (the API's submit body and every message composition renders). */
export const MESSAGE_MAX_CHARS = 100_000;
