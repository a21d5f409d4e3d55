/**
 * Bounded memos of the engine: hints it may lose (a lost entry costs one more read or look, never
 * a wrong answer). At the bound the entry made or renewed longest ago goes, because the entries a
 * memo still needs are the recent ones (a claim woken for a commit in flight, an agent admitted a
 * moment ago) and the oldest are those left behind (a commit that failed, an agent deleted):
 * clearing the whole memo would throw the first away with the second. A Map or Set keeps its
 * insertion order, so the oldest is its first entry and renewing one is a delete and an insert.
 */

/** Add `value` to `set` as its newest, then drop the oldest values beyond `bound`. */
export function addRecent<T>(set: Set<T>, value: T, bound: number): void {
  set.delete(value);
  set.add(value);
  while (set.size > bound) set.delete(set.values().next().value as T);
}

/** Set `key` in `map` as its newest, then drop the oldest keys beyond `bound`. */
export function setRecent<K, V>(map: Map<K, V>, key: K, value: V, bound: number): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > bound) map.delete(map.keys().next().value as K);
}
