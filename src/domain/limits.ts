/**
 * Column bounds that numeric inputs are checked against, so a value the database cannot hold is
 * a 400 naming the field rather than a database error.
 */

/** INTEGER columns (32-bit on PostgreSQL): log seq, attempts, priorities, settings. */
export const INT32_MAX = 2_147_483_647;
