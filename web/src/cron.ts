/** Cron in words for the common shapes; anything else is shown as the expression itself. */
const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const pad = (n: string) => n.padStart(2, '0');

function days(field: string): string | null {
  if (field === '*') return null;
  if (field === '1-5' || field === 'MON-FRI') return 'on weekdays';
  if (field === '0,6' || field === '6,0' || field === 'SAT,SUN') return 'on weekends';
  const list = field.split(',').map((d) => (/^\d$/.test(d) ? DAYS[Number(d) % 7] : undefined));
  if (list.every(Boolean)) return `on ${list.join(', ')}`;
  return `on weekdays ${field}`;
}

export function cronInWords(expr: string): string {
  const f = expr.trim().split(/\s+/);
  if (f.length === 6) {
    const [s, ...rest] = f;
    if (s === '0') return cronInWords(rest.join(' '));
    if (/^\*\/\d+$/.test(s!) && rest.every((x) => x === '*')) return `every ${s!.slice(2)} seconds`;
    return expr;
  }
  if (f.length !== 5) return expr;
  const [min, hour, dom, mon, dow] = f as [string, string, string, string, string];
  const dayPart = days(dow);
  const suffix = (s: string) => (dayPart ? `${s} ${dayPart}` : s);
  if (dom !== '*' || mon !== '*') {
    if (/^\d+$/.test(min) && /^\d+$/.test(hour) && /^\d+$/.test(dom) && mon === '*' && dow === '*')
      return `monthly on day ${dom} at ${pad(hour)}:${pad(min)}`;
    return expr;
  }
  if (min === '*' && hour === '*') return suffix('every minute');
  if (/^\*\/\d+$/.test(min) && hour === '*') return suffix(`every ${min.slice(2)} minutes`);
  if (/^\d+$/.test(min) && hour === '*') return suffix(min === '0' ? 'every hour, on the hour' : `every hour at minute ${min}`);
  if (/^\d+$/.test(min) && /^\*\/\d+$/.test(hour)) return suffix(`every ${hour.slice(2)} hours at minute ${min}`);
  if (/^\d+$/.test(min) && /^\d+(,\d+)*$/.test(hour)) {
    const times = hour
      .split(',')
      .map((h) => `${pad(h)}:${pad(min)}`)
      .join(', ');
    return dayPart ? `at ${times} ${dayPart}` : `every day at ${times}`;
  }
  return expr;
}
